//! Versioned contract implementations over the runtime data descriptor. The first ones land with the ExecutionManager issue; `contracts/` at the top level holds their specs.
