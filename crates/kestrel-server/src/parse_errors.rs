//! The answers hyper writes on its own to requests it cannot parse (a bad
//! request line, header or body length: 400; a URI too long: 414; too many
//! or too large headers: 431), given the JSON error body every other error
//! has. Hyper offers no hook for them: it writes a head with
//! `content-length: 0` straight to the connection, so a wrapper around the
//! connection recognises that head among the bytes written and sends it
//! with a body instead.

use std::io;
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use axum::http::StatusCode;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use crate::error::ApiError;

/// A connection whose writes pass through, except hyper's bodiless parse
/// error answers, which are rewritten (see the module documentation). It
/// does not claim vectored writes, so hyper hands it each response's head
/// as the start of one buffer.
pub(crate) struct JsonParseErrors<T> {
    inner: T,
    /// A rewritten answer being written, how much of it is written, and the
    /// length of hyper's bytes it stands for (reported once all is out).
    pending: Option<(Vec<u8>, usize, usize)>,
}

impl<T> JsonParseErrors<T> {
    pub(crate) fn new(inner: T) -> JsonParseErrors<T> {
        JsonParseErrors {
            inner,
            pending: None,
        }
    }
}

/// What to say for each status hyper answers a parse error with.
fn message(status: u16) -> Option<&'static str> {
    Some(match status {
        400 => "the request is not valid HTTP/1.1: its request line, a header or its body's length could not be parsed",
        414 => "the request's URI is too long",
        431 => "the request's headers are too many or too large",
        _ => return None,
    })
}

/// `bytes` with a JSON error body, if they are exactly one of hyper's parse
/// error answers: a 400, 414 or 431 head with `content-length: 0` and
/// nothing after it (the server's own errors always have a body).
fn rewrite(bytes: &[u8]) -> Option<Vec<u8>> {
    let status: u16 = std::str::from_utf8(bytes.strip_prefix(b"HTTP/1.1 ")?.get(..3)?)
        .ok()?
        .parse()
        .ok()?;
    let message = message(status)?;
    let head = std::str::from_utf8(bytes.strip_suffix(b"\r\n\r\n")?).ok()?;
    if head.contains("\r\n\r\n") {
        return None;
    }
    let mut lines = head.split("\r\n");
    let status_line = lines.next()?;
    let (zero, others): (Vec<&str>, Vec<&str>) =
        lines.partition(|l| l.eq_ignore_ascii_case("content-length: 0"));
    if zero.len() != 1 {
        return None;
    }
    let body = ApiError::new(StatusCode::from_u16(status).ok()?, message)
        .body()
        .to_string();
    let mut out = format!("{status_line}\r\n");
    for l in others {
        out.push_str(l);
        out.push_str("\r\n");
    }
    out.push_str("content-type: application/json; charset=utf-8\r\n");
    out.push_str(&format!("content-length: {}\r\n\r\n{body}", body.len()));
    Some(out.into_bytes())
}

impl<T: AsyncRead + Unpin> AsyncRead for JsonParseErrors<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for JsonParseErrors<T> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = &mut *self;
        if this.pending.is_none() {
            match rewrite(buf) {
                Some(answer) => this.pending = Some((answer, 0, buf.len())),
                None => return Pin::new(&mut this.inner).poll_write(cx, buf),
            }
        }
        // Hyper calls again with the same bytes while this returns Pending.
        let Some((answer, written, stands_for)) = &mut this.pending else {
            unreachable!("set above");
        };
        while *written < answer.len() {
            let n = ready!(Pin::new(&mut this.inner).poll_write(cx, &answer[*written..]))?;
            if n == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            *written += n;
        }
        let n = *stands_for;
        this.pending = None;
        Poll::Ready(Ok(n))
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn body_of(answer: &[u8]) -> serde_json::Value {
        let text = std::str::from_utf8(answer).unwrap();
        let (head, body) = text.split_once("\r\n\r\n").unwrap();
        let length: usize = head
            .lines()
            .find_map(|l| l.strip_prefix("content-length: "))
            .unwrap()
            .parse()
            .unwrap();
        assert_eq!(length, body.len(), "{text}");
        serde_json::from_str(body).unwrap()
    }

    #[test]
    fn hypers_parse_error_answers_get_a_json_body() {
        for status in [
            "400 Bad Request",
            "414 URI Too Long",
            "431 Request Header Fields Too Large",
        ] {
            let hyper = format!(
                "HTTP/1.1 {status}\r\nconnection: close\r\ncontent-length: 0\r\ndate: Thu, 03 Dec 2026 09:44:56 GMT\r\n\r\n"
            );
            let answer = rewrite(hyper.as_bytes()).expect(status);
            let text = String::from_utf8(answer.clone()).unwrap();
            assert!(
                text.starts_with(&format!("HTTP/1.1 {status}\r\n")),
                "{text}"
            );
            assert!(text.contains("\r\nconnection: close\r\n"), "{text}");
            assert!(text.contains("\r\ndate: Thu"), "{text}");
            assert!(!text.contains("content-length: 0\r\n"), "{text}");
            let e = &body_of(&answer)["error"];
            assert_eq!(e["code"].as_u64(), status[..3].parse().ok(), "{e}");
            assert_eq!(e["type"], "invalid_request_error");
            assert!(e["message"].as_str().is_some_and(|m| !m.is_empty()));
        }
    }

    #[test]
    fn other_writes_pass_unchanged() {
        for bytes in [
            // The server's own errors carry their body.
            &b"HTTP/1.1 400 Bad Request\r\ncontent-length: 2\r\n\r\n{}"[..],
            // Not an error status.
            b"HTTP/1.1 204 No Content\r\ncontent-length: 0\r\n\r\n",
            b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n",
            // A head followed by more bytes, or not ended.
            b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\n\r\nx",
            b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\n",
            // Body bytes of a stream.
            b"data: {\"x\":1}\n\n",
            b"",
        ] {
            assert!(
                rewrite(bytes).is_none(),
                "{:?}",
                String::from_utf8_lossy(bytes)
            );
        }
    }

    /// A sink that takes at most `step` bytes a call and says Pending every
    /// other call, as a slow socket may.
    struct Trickle {
        out: Vec<u8>,
        step: usize,
        stall: bool,
    }

    impl AsyncWrite for Trickle {
        fn poll_write(
            mut self: Pin<&mut Self>,
            cx: &mut Context<'_>,
            buf: &[u8],
        ) -> Poll<io::Result<usize>> {
            self.stall = !self.stall;
            if self.stall {
                cx.waker().wake_by_ref();
                return Poll::Pending;
            }
            let n = buf.len().min(self.step);
            self.out.extend_from_slice(&buf[..n]);
            Poll::Ready(Ok(n))
        }
        fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
            Poll::Ready(Ok(()))
        }
        fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
            Poll::Ready(Ok(()))
        }
    }

    #[test]
    fn a_rewritten_answer_survives_partial_writes() {
        async fn write_all<W: AsyncWrite + Unpin>(w: &mut W, mut buf: &[u8]) {
            while !buf.is_empty() {
                let n = std::future::poll_fn(|cx| Pin::new(&mut *w).poll_write(cx, buf))
                    .await
                    .unwrap();
                buf = &buf[n..];
            }
        }
        let hyper = b"HTTP/1.1 414 URI Too Long\r\nconnection: close\r\ncontent-length: 0\r\n\r\n";
        let then = b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n";
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let out = rt.block_on(async {
            let mut w = JsonParseErrors::new(Trickle {
                out: Vec::new(),
                step: 7,
                stall: false,
            });
            write_all(&mut w, hyper).await;
            write_all(&mut w, then).await;
            w.inner.out
        });
        let expected = [rewrite(hyper).unwrap(), then.to_vec()].concat();
        assert_eq!(
            String::from_utf8_lossy(&out),
            String::from_utf8_lossy(&expected)
        );
        assert_eq!(body_of(&rewrite(hyper).unwrap())["error"]["code"], 414);
    }
}
