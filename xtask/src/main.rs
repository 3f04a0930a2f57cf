//! Project automation. `cargo xtask build-plugins`, `cargo xtask test`, `cargo xtask demo`.

mod plugins;

fn main() -> anyhow::Result<()> {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(std::path::Path::to_path_buf)
        .ok_or_else(|| anyhow::anyhow!("xtask must live one level below the repository root"))?;
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        Some("build-plugins") => plugins::build_plugins(&root),
        _ => {
            eprintln!("usage: cargo xtask <build-plugins>");
            std::process::exit(2)
        }
    }
}
