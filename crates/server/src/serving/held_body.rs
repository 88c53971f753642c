//! `HeldBody`: a reply body that holds a guard until the body is done or dropped, so what the
//! guard stands for (a drain's admission, a model kept loaded) lasts as long as the stream,
//! not just until the headers are sent.

use std::pin::Pin;
use std::task::{Context, Poll};

use axum::body::{Body, Bytes};
use http_body::{Frame, SizeHint};

pub struct HeldBody<G> {
    body: Body,
    _guard: G,
}

impl<G: Send + Unpin + 'static> HeldBody<G> {
    /// `body`, holding `guard` until it ends, as a body axum replies with.
    pub fn wrap(body: Body, guard: G) -> Body {
        Body::new(Self {
            body,
            _guard: guard,
        })
    }
}

impl<G: Unpin> http_body::Body for HeldBody<G> {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        Pin::new(&mut self.body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}
