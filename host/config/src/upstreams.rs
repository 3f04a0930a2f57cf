//! `[upstreams.mcp.NAME]` resolved: paths against the config file, defaults filled in, the
//! provider's own configuration type (what everything downstream reads).

use crate::model::{Config, McpUpstreamSection, SecretSetting};
use capgate_provider::mcp::{McpTransportConfig, McpUpstreamConfig, SecretValue};
use std::collections::BTreeMap;
use std::time::Duration;

impl Config {
    /// Every `[upstreams.mcp.NAME]` as the provider's configuration. Call after the file
    /// was checked (exactly one of `url`/`command`, a program named): an entry that is
    /// neither is left out.
    pub fn mcp_upstreams(&self) -> BTreeMap<String, McpUpstreamConfig> {
        self.upstreams
            .mcp
            .iter()
            .filter_map(|(name, u)| Some((name.clone(), self.mcp_upstream(name, u)?)))
            .collect()
    }

    fn mcp_upstream(&self, name: &str, u: &McpUpstreamSection) -> Option<McpUpstreamConfig> {
        let secrets = |m: &BTreeMap<String, SecretSetting>| {
            m.iter()
                .map(|(k, v)| (k.clone(), self.secret_value(v)))
                .collect::<BTreeMap<_, _>>()
        };
        let transport = match (&u.url, &u.command) {
            (Some(url), None) => McpTransportConfig::Http {
                url: url.clone(),
                headers: secrets(&u.headers),
                ca_file: u.ca_file.as_ref().map(|p| self.relative(p)),
            },
            (None, Some(command)) => {
                let (program, args) = command.split_first()?;
                McpTransportConfig::Stdio {
                    program: program.clone(),
                    args: args.to_vec(),
                    env: secrets(&u.env),
                    inherit: u.inherit_env.clone(),
                    cwd: u.cwd.as_ref().map(|p| self.relative(p)),
                }
            }
            _ => return None,
        };
        let mut config = McpUpstreamConfig::new(name, transport);
        if let Some(ms) = u.connect_timeout_ms {
            config.connect_timeout = Duration::from_millis(ms);
        }
        if let Some(n) = u.max_concurrent_calls {
            config.max_concurrent_calls = usize::try_from(n).unwrap_or(usize::MAX);
        }
        if let Some(ms) = u.relist_interval_ms {
            config.relist_interval = Duration::from_millis(ms);
        }
        Some(config)
    }

    /// A header or environment value as the provider resolves it (at each use): paths
    /// against this file.
    pub fn secret_value(&self, v: &SecretSetting) -> SecretValue {
        match v {
            SecretSetting::Literal(s) => SecretValue::Literal(s.clone()),
            SecretSetting::From(src) => match (&src.env, &src.file) {
                (Some(name), _) => SecretValue::Env {
                    name: name.clone(),
                    prefix: src.prefix.clone(),
                },
                (None, Some(path)) => SecretValue::File {
                    path: self.relative(path),
                    prefix: src.prefix.clone(),
                },
                // Refused by the file's checks; an empty literal if ever reached.
                (None, None) => SecretValue::Literal(String::new()),
            },
        }
    }
}
