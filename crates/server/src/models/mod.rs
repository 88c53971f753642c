//! Several models in one server, by name. From the top: `model_switch` (the routes in front:
//! each request goes to its `model`'s own router, unchanged; `/v1/models`, `/health`,
//! `/metrics` and `/models/load|unload` answered for all), `model_registry` (which models are
//! loaded, loading on a first request, unloading the least recently used or idle ones),
//! `exposition_merge` (one `/metrics` out of each model's), `model_catalog` (the names and
//! where each model comes from), `model_flags` (each model's own engine flags),
//! `model_footprint` (the memory a model is counted as holding) and `models_args` (the flags).

pub mod exposition_merge;
pub mod model_catalog;
pub mod model_flags;
pub mod model_footprint;
pub mod model_registry;
pub mod model_switch;
pub mod models_args;
