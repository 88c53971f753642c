//! The HTTP server: startup and shutdown (`api_server`; `models_server` for several models), the router and the layers around
//! every route (`router`), and the routes that belong to no protocol: info and health,
//! tokenize, the prefix-cache debug view and SGLang's info endpoints.

pub mod api_server;
pub mod info;
pub mod models_server;
pub mod prefix_cache;
pub mod router;
pub mod serve_command;
pub mod sglang;
pub mod tokenize;
