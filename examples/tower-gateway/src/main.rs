//! Serve the governed shop on 127.0.0.1:8090 (or `$PORT`), audit as JSON lines on stdout.
//!
//! ```sh
//! cargo run -p capgate-example-tower
//! curl -s localhost:8090/orders/ord_1                                  # ungoverned
//! curl -s -H 'authorization: Bearer dana-key' -H 'content-type: application/json' \
//!      -d '{"orderId":"ord_1","amount":20}' localhost:8090/orders/refund    # 200, refunded
//! curl -s -H 'authorization: Bearer dana-key' -H 'content-type: application/json' \
//!      -d '{"orderId":"ord_1","amount":649}' localhost:8090/orders/refund   # 202, held
//! ```

use capgate_core::audit::JsonLinesSink;
use capgate_example_tower::{Shop, app};
use std::sync::Arc;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let port = std::env::var("PORT").unwrap_or_else(|_| "8090".into());
    let (app, _runtime) = app(Shop::default(), Arc::new(JsonLinesSink::stdout()))?;
    let listener = tokio::net::TcpListener::bind(format!("127.0.0.1:{port}")).await?;
    eprintln!(
        "the governed shop listens on http://{}",
        listener.local_addr()?
    );
    axum::serve(listener, app).await?;
    Ok(())
}
