//! Host-side bindings of the WIT contract (`wit/capgate.wit`), generated for one union world
//! that imports the host functions and exports every plugin interface. A component is bound
//! per interface (`*Indices::new` fails when that export is absent), so a policy component
//! never needs to export anything else.

wasmtime::component::bindgen!({
    path: "../../wit",
    inline: "
        package capgate:host;

        world all {
            import capgate:plugin/host@0.1.0;
            import capgate:plugin/progress@0.1.0;
            export capgate:plugin/policy@0.1.0;
            export capgate:plugin/redactor@0.1.0;
            export capgate:plugin/procedure@0.1.0;
            export capgate:plugin/health@0.1.0;
            export capgate:plugin/authorizer@0.1.0;
        }
    ",
    world: "capgate:host/all",
});

pub(crate) use capgate::plugin::host::LogLevel;
pub(crate) use capgate::plugin::types as wit;
pub(crate) use exports::capgate::plugin::authorizer as wit_authorizer;
pub(crate) use exports::capgate::plugin::health as wit_health;
pub(crate) use exports::capgate::plugin::policy as wit_policy;
pub(crate) use exports::capgate::plugin::procedure as wit_procedure;
pub(crate) use exports::capgate::plugin::redactor as wit_redactor;

/// The export names a binding may ask for, as the component model spells them.
pub(crate) mod names {
    /// `policy`.
    pub const POLICY: &str = "capgate:plugin/policy@0.1.0";
    /// `redactor`.
    pub const REDACTOR: &str = "capgate:plugin/redactor@0.1.0";
    /// `procedure`.
    pub const PROCEDURE: &str = "capgate:plugin/procedure@0.1.0";
    /// `health`.
    pub const HEALTH: &str = "capgate:plugin/health@0.1.0";
    /// `authorizer`.
    pub const AUTHORIZER: &str = "capgate:plugin/authorizer@0.1.0";
}
