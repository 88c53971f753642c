//! tokenmill bench: measures any OpenAI-compatible server.
