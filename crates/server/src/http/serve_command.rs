//! The `serve` command: one model (`api_server`, loaded before the server listens), or
//! several by name (`models_server`, each loaded on its first request), as the flags ask.

use crate::http::api_server::{self, ServeArgs};
use crate::http::models_server;

pub fn run(args: ServeArgs) -> anyhow::Result<()> {
    if args.several_models() {
        models_server::run(args)
    } else {
        api_server::run(args)
    }
}
