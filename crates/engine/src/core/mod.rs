//! The engine core: the single owner of engine state (`Engine`), the thread and typed
//! commands that drive it (`EngineHandle`), and how it is built from flags (`EngineArgs`).

pub mod completion;
pub mod engine;
#[cfg(feature = "cli")]
pub mod engine_args;
pub mod engine_handle;
pub mod engine_limits;
pub mod step_times;
