//! Host-side bindings of the WIT contract (`wit/capgate.wit`, `capgate:plugin@0.3.0`, with the
//! frozen 0.1.0 and 0.2.0 packages in `wit/deps/`), generated for one union world that imports
//! the host functions and exports every plugin interface of every version the host serves. A component
//! is bound per interface (`*Indices::new` fails when that export is absent), so a policy
//! component never needs to export anything else.
//!
//! Three versions of `capgate:plugin` are in scope, so the generator mangles the version into
//! the package module (`plugin0_1_0`, `plugin0_2_0`, `plugin0_3_0`). The rest of the crate
//! sees the stable 0.1.0 interfaces as `wit::capgate::plugin::…`, the versioned authorizers
//! through [`wit_authorizer`] (0.2.0) and [`wit_authorizer_v1`] (0.1.0), and 0.3.0's lazy
//! `request` import as [`wit_request`].

mod generated {
    wasmtime::component::bindgen!({
        path: "../../wit",
        inline: "
            package capgate:host;

            world all {
                import capgate:plugin/host@0.1.0;
                import capgate:plugin/progress@0.1.0;
                import capgate:plugin/request@0.3.0;
                export capgate:plugin/policy@0.1.0;
                export capgate:plugin/redactor@0.1.0;
                export capgate:plugin/procedure@0.1.0;
                export capgate:plugin/health@0.1.0;
                export capgate:plugin/authorizer@0.2.0;
                export capgate:plugin/authorizer@0.1.0;
            }
        ",
        world: "capgate:host/all",
        // Every guest call is `call_async`, so a guest that runs past the inline slice
        // can yield at an epoch tick and move off the caller's thread.
        exports: { default: async },
    });
}

/// The imported (host-implemented) interfaces, at the path they had before 0.2.0.
pub(crate) mod capgate {
    pub(crate) use super::generated::capgate::plugin0_1_0 as plugin;
}

pub(crate) use capgate::plugin::host::LogLevel;
pub(crate) use capgate::plugin::types as wit;
/// `capgate:plugin/authorizer@0.1.0`: the gateway's five operations, no surface.
pub(crate) use generated::exports::capgate::plugin0_1_0::authorizer as wit_authorizer_v1;
pub(crate) use generated::exports::capgate::plugin0_1_0::health as wit_health;
pub(crate) use generated::exports::capgate::plugin0_1_0::policy as wit_policy;
pub(crate) use generated::exports::capgate::plugin0_1_0::procedure as wit_procedure;
pub(crate) use generated::exports::capgate::plugin0_1_0::redactor as wit_redactor;
/// `capgate:plugin/authorizer@0.2.0`: told the surface, asked about the approvals API too.
pub(crate) use generated::exports::capgate::plugin0_2_0::authorizer as wit_authorizer;

/// `capgate:plugin/request@0.3.0`: one pointer of the call's parsed documents at a time.
pub(crate) use generated::capgate::plugin0_3_0::request as wit_request;

/// The export names a binding may ask for, as the component model spells them.
pub(crate) mod names {
    /// The policy interface, which policies bind to.
    pub const POLICY: &str = "capgate:plugin/policy@0.1.0";
    /// The redactor interface, which redactors bind to.
    pub const REDACTOR: &str = "capgate:plugin/redactor@0.1.0";
    /// The procedure interface, which procedures bind to.
    pub const PROCEDURE: &str = "capgate:plugin/procedure@0.1.0";
    /// The optional health interface a procedure may also export.
    pub const HEALTH: &str = "capgate:plugin/health@0.1.0";
    /// `authorizer`, told the surface (tried first).
    pub const AUTHORIZER: &str = "capgate:plugin/authorizer@0.2.0";
    /// `authorizer` as first published (tried when the component has no 0.2.0 export).
    pub const AUTHORIZER_V1: &str = "capgate:plugin/authorizer@0.1.0";
    /// The lazy request import (0.3.0): a component that imports it is lent each call's
    /// parsed values.
    pub const REQUEST: &str = "capgate:plugin/request@0.3.0";
}
