//! state-probe (authorizer): denies with a reason holding every call this instance has seen
//! (the input's `marker` recorded), so a test can tell a fresh instance from a reused one.

use capgate_plugin::{AuthorizeRequest, Authorizer, export_authorizer};

#[path = "../../state-probe-common/record.rs"]
mod record;
use record::record;

struct Probe;

impl Authorizer for Probe {
    fn authorize(request: AuthorizeRequest) -> Result<(), String> {
        Err(record(request.input_value("/marker")).to_string())
    }
}

export_authorizer!(Probe);
