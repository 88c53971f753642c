//! The words every layer speaks: the generation request as read from the wire, which every
//! protocol is translated into (`GenerationRequest`), and the error every failure a client
//! sees is answered with (`ApiError`).

pub mod api_error;
pub mod generation_request;
