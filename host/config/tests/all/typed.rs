//! Settings typed as what they mean (`IsolationMode`, `AuthorizeSetting`,
//! `SecureCookieSetting`, `ProxyAddress`): a value outside their forms is a located problem at the key,
//! and each accepted form reads as the setting it names.

use capgate_config::SecureCookie;
use capgate_config::{AuthorizeSetting, Config, IsolationMode, Problem};
use std::path::Path;

fn parse(text: &str) -> Result<Config, Vec<Problem>> {
    Config::parse(Path::new("capgate.toml"), text.to_string()).map(|(cfg, _)| cfg)
}

/// The message at `key`, if the text has problems and one is there.
fn problem_at(text: &str, key: &str) -> Option<String> {
    let problems = parse(text).err()?;
    problems
        .into_iter()
        .find(|p| p.key == key)
        .map(|p| p.message)
}

#[test]
fn a_value_outside_a_typed_setting_is_a_problem_at_its_key() {
    let plugin = "[plugins.limits]\npath = \"p.wasm\"\nsha256 = \"0000000000000000000000000000000000000000000000000000000000000000\"\n";
    for (text, key, says) in [
        (
            format!("{plugin}isolation = \"shared\"\n"),
            "plugins.limits.isolation",
            "unknown variant `shared`, expected `fresh` or `pooled`",
        ),
        (
            "[gateway]\nauthorize = \"anyone\"\n".to_string(),
            "gateway.authorize",
            "must be \"authenticated\"",
        ),
        (
            "[gateway]\nauthorize = { plugin = \"gate\", extra = 1 }\n".to_string(),
            "gateway.authorize",
            "unknown field `extra`",
        ),
        (
            "[gateway.console]\nsecureCookie = \"sometimes\"\n".to_string(),
            "gateway.console.secureCookie",
            "must be \"auto\"",
        ),
        (
            "[gateway.console]\nsecureCookie = 1\n".to_string(),
            "gateway.console.secureCookie",
            "must be \"auto\"",
        ),
        (
            "[gateway]\ntrustedProxies = [\"10.0.0.5\", \"proxy.internal\"]\n".to_string(),
            "gateway.trustedProxies.1",
            "`proxy.internal` is not an IP address",
        ),
    ] {
        let message = problem_at(&text, key);
        assert!(
            message.as_deref().is_some_and(|m| m.contains(says)),
            "{text}: at {key} expected `{says}`, got {message:?}"
        );
    }
}

#[test]
fn each_accepted_form_reads_as_the_setting_it_names() {
    let plugin = "[plugins.limits]\npath = \"p.wasm\"\nsha256 = \"0000000000000000000000000000000000000000000000000000000000000000\"\nisolation = \"pooled\"\n";
    let text = format!(
        "{plugin}\n[gateway]\nauthorize = {{ plugin = \"limits\", config = {{ tier = \"gold\" }} }}\n\n[gateway.console]\nsecureCookie = false\n"
    );
    let cfg = match parse(&text) {
        Ok(cfg) => cfg,
        Err(problems) => panic!("{problems:#?}"),
    };
    assert_eq!(
        cfg.plugins.get("limits").and_then(|p| p.isolation),
        Some(IsolationMode::Pooled)
    );
    match &cfg.gateway.authorize {
        Some(AuthorizeSetting::Plugin(a)) => {
            assert_eq!(a.plugin, "limits");
            assert_eq!(a.config, serde_json::json!({"tier": "gold"}));
        }
        other => panic!("authorize: {other:?}"),
    }
    assert_eq!(cfg.gateway.console.secure_cookie.0, SecureCookie::Never);

    let word = parse("[gateway]\nauthorize = \"authenticated\"\n").map(|c| c.gateway.authorize);
    assert!(
        matches!(word, Ok(Some(AuthorizeSetting::Authenticated))),
        "{word:?}"
    );
    let default = parse("").map(|c| c.gateway.console.secure_cookie.0);
    assert!(matches!(default, Ok(SecureCookie::Auto)), "{default:?}");
}

#[test]
fn a_jwt_with_two_key_sources_is_one_problem_at_its_table_and_the_rest_of_gateway_is_still_checked()
{
    let problems = parse(
        "[gateway]\nlisten = \"nowhere\"\n[gateway.jwt]\njwksUrl = \"https://idp.example.com/jwks\"\nhs256SecretEnv = \"JWT_SECRET\"\nissuer = \"https://idp.example.com\"\naudience = \"capgate\"\n",
    )
    .expect_err("refused");
    assert!(
        problems
            .iter()
            .any(|p| p.key == "gateway.jwt" && p.message.contains("set exactly one key source")),
        "{problems:#?}"
    );
    // [gateway.jwt] is read on its own: its mistake does not hide [gateway]'s.
    assert!(
        problems.iter().any(|p| p.key == "gateway.listen"),
        "{problems:#?}"
    );
    // One source reads as that source.
    let cfg = parse(
        "[gateway.jwt]\njwksUrl = \"https://idp.example.com/jwks\"\nissuer = \"https://idp.example.com\"\naudience = \"capgate\"\n",
    )
    .expect("accepted");
    assert_eq!(
        cfg.gateway.jwt.map(|j| j.key_source),
        Some(capgate_config::JwtKeySource::JwksUrl(
            "https://idp.example.com/jwks".into()
        ))
    );
}
