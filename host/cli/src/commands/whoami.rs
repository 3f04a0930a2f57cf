//! `capgate whoami`: the principal a credential maps to under a deployment's configuration
//! — a JWT from the identity provider through `[gateway.jwt]` (its keys, `iss`, `aud`,
//! `exp`, and `[gateway.jwt.claims]`), or an API key — for debugging a claim mapping
//! before anyone signs in with it.

use super::shared::{ConfigArg, OutputArg, print_json};
use crate::exit::Status;
use anyhow::Context;
use std::io::Read;
use std::process::ExitCode;

/// Show the principal a token or API key maps to: actor, namespace, roles, surfaces,
/// attributes, the doors it opens and when it expires — exactly as every door would
/// establish it, signature, issuer, audience and expiry checked.
///
/// The credential is read from standard input with `--token -` (recommended: a token on the
/// command line is visible to `ps` and kept in shell history).
///
/// With `--output json`, stdout is one JSON document: `{"ok", "principal"}` or
/// `{"ok": false, "reason"}`.
///
/// Example: printf '%s' "$TOKEN" | capgate whoami --config capgate.toml --token -
#[derive(clap::Args, Debug)]
pub struct WhoamiArgs {
    #[command(flatten)]
    config: ConfigArg,
    /// The token or API key, or `-` to read it from standard input.
    #[arg(long)]
    token: String,
    #[command(flatten)]
    output: OutputArg,
}

/// The longest credential read (a JWT with many claims fits).
const MAX_TOKEN_BYTES: usize = 16 * 1024;

/// `capgate whoami`: 0 with the principal printed, 1 when the credential is refused (the
/// reason printed), 2 when no credential could be read.
pub fn run(args: WhoamiArgs) -> anyhow::Result<ExitCode> {
    let token = if args.token == "-" {
        let mut buf = String::new();
        std::io::stdin()
            .take(MAX_TOKEN_BYTES as u64 + 1)
            .read_to_string(&mut buf)
            .context("cannot read the token from standard input")?;
        buf
    } else {
        args.token.clone()
    };
    let token = token.trim();
    if token.is_empty() || token.len() > MAX_TOKEN_BYTES {
        eprintln!("error: no token (or one longer than {MAX_TOKEN_BYTES} bytes) was given");
        return Ok(Status::Usage.code());
    }
    let Ok(header) = axum::http::HeaderValue::from_str(&format!("Bearer {token}")) else {
        eprintln!("error: the token holds characters no Authorization header can carry");
        return Ok(Status::Usage.code());
    };
    let checked = args.config.load()?;
    let mut headers = axum::http::HeaderMap::new();
    headers.insert(axum::http::header::AUTHORIZATION, header);
    let authenticator = checked.authenticator();
    let rt = crate::runtime()?;
    let result = rt.block_on(async move { authenticator.authenticate(&headers).await });
    let now = chrono::Utc::now();
    let who =
        result.and_then(|who| capgate_gateway::auth::check_principal(&who, now).map(|()| who));
    let json = args.output.json();
    match who {
        Ok(who) => {
            let principal = principal_json(&who);
            if json {
                print_json(&serde_json::json!({ "ok": true, "principal": principal }))?;
            } else {
                print_text(&who);
            }
            Ok(Status::Ok.code())
        }
        Err(e) => {
            if json {
                print_json(&serde_json::json!({ "ok": false, "reason": e.to_string() }))?;
            }
            eprintln!("refused: {e}");
            Ok(Status::Failed.code())
        }
    }
}

/// The doors a principal opens, as every door's binding decides it.
fn doors(who: &capgate_gateway::auth::Authenticated) -> Vec<String> {
    if who.operator {
        return vec!["admin".into()];
    }
    let mut doors: Vec<String> = who.surfaces.iter().map(|s| s.as_str().to_owned()).collect();
    if who.has_role(crate::serve::APPROVER_ROLE) || who.requester_door {
        doors.push("approvals".into());
    }
    doors
}

fn principal_json(who: &capgate_gateway::auth::Authenticated) -> serde_json::Value {
    serde_json::json!({
        "actor": { "id": who.principal.actor.id, "kind": who.principal.actor.kind.as_str() },
        "namespace": who.principal.namespace,
        "roles": who.roles,
        "surfaces": who.surfaces.iter().map(|s| s.as_str()).collect::<Vec<_>>(),
        "attributes": who.principal.actor.attributes,
        "requesterDoor": who.requester_door,
        "approver": who.has_role(crate::serve::APPROVER_ROLE),
        "doors": doors(who),
        "expiresAt": who.expires_at.map(|t| t.to_rfc3339()),
        "credential": match &who.credential {
            capgate_gateway::auth::Credential::ApiKey { .. } => "apiKey",
            capgate_gateway::auth::Credential::Token => "token",
        },
    })
}

fn print_text(who: &capgate_gateway::auth::Authenticated) {
    let list = |v: Vec<String>| {
        if v.is_empty() {
            "(none)".to_owned()
        } else {
            v.join(", ")
        }
    };
    println!(
        "actor          {}:{}",
        who.principal.actor.kind.as_str(),
        who.principal.actor.id
    );
    println!("namespace      {}", who.principal.namespace);
    println!("roles          {}", list(who.roles.clone()));
    println!(
        "surfaces       {}",
        list(who.surfaces.iter().map(|s| s.as_str().to_owned()).collect())
    );
    println!("requesterDoor  {}", who.requester_door);
    println!("attributes     {}", who.principal.actor.attributes);
    println!("doors          {}", list(doors(who)));
    println!(
        "expires        {}",
        who.expires_at
            .map_or_else(|| "never (an API key)".to_owned(), |t| t.to_rfc3339())
    );
}
