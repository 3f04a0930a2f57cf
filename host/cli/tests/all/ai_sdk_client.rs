//! The TypeScript client (`clients/ts`, npm `@capgate/client`) against the real server: the
//! registry's `ai` package runs `generateText` with a mock model and the tools from
//! `toAISDKTools`; the model's tool call reaches the runtime as the authenticated actor and
//! approval-required flows back as a tool result. `cargo xtask test` installs the package's
//! dependencies (`npm ci` in clients/ts) before the Rust tests run.

use crate::common;

use common::*;

#[test]
fn the_ai_sdk_tools_drive_the_gateway_as_the_authenticated_actor() {
    let client = root().join("clients/ts");
    assert!(
        client.join("node_modules/ai").is_dir(),
        "{}: run `npm ci` there (cargo xtask test does)",
        client.display()
    );
    let dir = tempfile::tempdir().expect("tempdir");
    let store = format!("sqlite://{}", dir.path().join("capgate.db").display());
    let server = Server::start(&example_config(), &store);
    let out = std::process::Command::new("npm")
        .args(["run", "--silent", "test:gateway"])
        .current_dir(&client)
        .env("CAPGATE_URL", format!("{}/agent", server.base))
        .env("CAPGATE_TOKEN", "dana-dev-key")
        .env("CAPGATE_EXPECT_ACTOR", "u_dana")
        .output()
        .expect("run npm");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(stdout.contains("# pass 1"), "{stdout}");
    assert!(stdout.contains("# fail 0"), "{stdout}");
}
