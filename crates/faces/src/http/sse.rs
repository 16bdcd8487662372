//! Live reads as Server-Sent Events: each batch of data is one `data` event (text as is,
//! JSON as an array, anything else base64) followed at once by its `control` event; keepalive
//! comments while idle; the connection ends at EOF, or after a minute for the client to
//! reconnect from its last offset.
//!
//! A waiting reader holds no timer: the face nudges the readers of quiet streams every few
//! seconds, and each then sends a keepalive comment if one is due, or ends its connection.
//!
//! Each control event also carries its offset as the SSE event id (a tapedeck extension): a
//! browser's EventSource sends it back as `Last-Event-ID` when it reconnects by itself, and
//! the read resumes there, not at the URL's original offset, so nothing arrives twice.
use std::time::{Duration, Instant};

use axum::body::Body;
use base64::Engine;
use bytes::{BufMut, Bytes, BytesMut};
use futures::Stream;
use http::StatusCode;

use super::HttpFace;
use super::cursor;
use super::failure::failed;
use super::json;
use super::offset::{Offset, ReadFrom};
use super::reply::*;
use super::whole_characters::unfinished_character;
use crate::id::ConversationId;
use crate::recorder::Status;
use crate::recorder::streams::{LineageReader, StreamSnapshot, essence};

/// Most bytes in one `data` event.
const MAX_EVENT_BYTES: usize = 256 * 1024;
/// Most bytes of a data event left for the other readers of its stream (see `next_event`):
/// the live events many readers share are small; a catch-up's are not shared.
const MAX_SHARED_BYTES: usize = 16 * 1024;
/// A comment is sent after this long without an event, so idle proxies keep the connection.
const KEEPALIVE: Duration = Duration::from_secs(15);
/// Connections end after this long, as the protocol recommends, for caches to collapse
/// reconnecting clients.
const MAX_CONNECTION: Duration = Duration::from_secs(60);

/// How often the readers of quiet live streams are nudged to look at their clock (see
/// [`nudge_readers`]): a keepalive goes out within this long after it is due, and a connection
/// ends within this long after `MAX_CONNECTION`.
const NUDGE_EVERY: Duration = Duration::from_secs(5);
/// Most steps a round of nudges is spread over (each a sleep of at least 10 ms).
const NUDGE_STEPS: usize = 500;

/// Nudges the readers of every quiet live stream (no chunk for [`NUDGE_EVERY`]) once every
/// [`NUDGE_EVERY`], a few streams at a time, spread over it: never every reader in one burst.
/// A busy stream's readers need none: each commit wakes them, and they look at the clock as
/// they catch up. A waiting reader holds no timer of its own (see `next_event`). Runs until
/// aborted.
pub(crate) async fn nudge_readers(recorder: crate::recorder::Recorder) {
    loop {
        let nudges = recorder.reader_nudges(NUDGE_EVERY);
        let steps = nudges.len().clamp(1, NUDGE_STEPS);
        let pause = NUDGE_EVERY / steps as u32;
        for some in nudges.chunks(nudges.len().div_ceil(steps).max(1)) {
            some.iter().for_each(|nudge| nudge.nudge());
            tokio::time::sleep(pause).await;
        }
        if nudges.is_empty() {
            tokio::time::sleep(pause).await;
        }
    }
}

/// How a stream's bytes are written into `data` events.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Encoding {
    Text,
    Json,
    Base64,
}

impl Encoding {
    /// How a stream of `snapshot`'s content type goes out over SSE: text as it is, JSON as
    /// arrays, anything else in base64.
    pub(super) fn of(snapshot: &StreamSnapshot) -> Self {
        let essence = essence(&snapshot.content_type).to_ascii_lowercase();
        if snapshot.is_json() {
            Encoding::Json
        } else if essence.starts_with("text/") {
            Encoding::Text
        } else {
            Encoding::Base64
        }
    }
}

impl HttpFace {
    /// GET with `live=sse`; `counted` among the recording's readers, unless an observer (the
    /// console) asks.
    pub(crate) async fn sse(
        &self,
        id: &ConversationId,
        from: ReadFrom,
        cursor_param: Option<String>,
        counted: bool,
    ) -> Replied {
        let (snapshot, offset) = self.found(id, true, Some(from)).await?;
        let encoding = Encoding::of(&snapshot);
        // JSON mode reads whole messages, as `Encoding::Json` frames them.
        let reader = self
            .streams
            .reader(id, &snapshot, offset)
            .await
            .map_err(failed)?;
        let reader = if counted { reader } else { reader.uncounted() };
        let mut reply = Reply::new(StatusCode::OK)
            .content_type("text/event-stream")
            .cache("no-cache");
        if encoding == Encoding::Base64 {
            reply = reply.named(STREAM_SSE_DATA_ENCODING, "base64");
        }
        let stop = self.recorder.stopping().clone();
        let events = events(reader, encoding, cursor_param, stop);
        Ok(reply.body(Body::from_stream(events)))
    }
}

/// Where an event stream is between two events.
struct Events {
    reader: LineageReader,
    /// The cursor of the last control event; before the first, the cursor the first is to
    /// carry (from the request's).
    cursor: u64,
    first: bool,
    /// The last control event said more was committed than its event carried (the event was
    /// full): the next goes out as soon as there is nothing more, data or not, to say that the
    /// reader is up to date.
    behind: bool,
    /// Text read but not yet sent: the first bytes of a character whose rest is not committed.
    held: Vec<u8>,
    /// When a keepalive is due, if nothing is sent before.
    keepalive_at: Instant,
    /// When the connection ends, for the client to reconnect.
    deadline: Instant,
    encoding: Encoding,
    /// The recorder's stop: it ends the stream.
    stop: tokio_util::sync::CancellationToken,
}

/// The event stream of `reader`.
fn events(
    reader: LineageReader,
    encoding: Encoding,
    cursor_param: Option<String>,
    stop: tokio_util::sync::CancellationToken,
) -> impl Stream<Item = Result<Bytes, std::convert::Infallible>> {
    let now = Instant::now();
    // Boxed: moved from one event to the next, it is never copied twice into a future; and
    // it holds all an event needs, so making the next event's future copies nothing more.
    let state = Some(Box::new(Events {
        reader,
        cursor: cursor::next(cursor_param.as_deref()),
        first: true,
        behind: false,
        held: Vec::new(),
        keepalive_at: now + KEEPALIVE,
        deadline: now + MAX_CONNECTION,
        encoding,
        stop,
    }));
    futures::stream::unfold(state, next_event)
}

/// The next event of the stream `state` is at, and where it is after it; `None` once it has
/// ended. A caught-up reader waits here for long, so the future is kept small: reads are
/// boxed, and the wait is only for a change, with no timer: readers of a quiet stream are
/// nudged every few seconds (see [`nudge_readers`]), and all at the recorder's stop, and look
/// at the time and the stop then.
async fn next_event(
    state: Option<Box<Events>>,
) -> Option<(Result<Bytes, std::convert::Infallible>, Option<Box<Events>>)> {
    let mut state = state?;
    let encoding = state.encoding;
    let mut batch = Vec::new();
    let mut bytes = 0;
    let mut from;
    loop {
        let reader = &mut state.reader;
        // The readers of a live stream wake together at a commit: the first to get here reads
        // and renders the new data event, and leaves it for the others at the same place.
        from = state.held.is_empty().then(|| reader.place()).flatten();
        if from.is_some()
            && let Some(data) = reader.take_rendering(encoding as u8)
        {
            // Taken only when it holds everything committed, the stream still open.
            let mut out = BytesMut::with_capacity(data.len() + 256);
            out.put_slice(&data);
            finish_event(&mut state, &mut out, true);
            return Some((Ok(out.freeze()), Some(state)));
        }
        // Everything committed already goes out at once.
        while bytes < MAX_EVENT_BYTES {
            match Box::pin(reader.ready(MAX_EVENT_BYTES - bytes)).await {
                Ok(Some(piece)) => {
                    bytes += piece.data.len();
                    batch.push(piece.data);
                }
                Ok(None) => break,
                Err(err) => {
                    tracing::warn!(error = %err, "SSE read failed");
                    return None;
                }
            }
        }
        // The first control goes out at once, data or not, to say where the reader is; so does
        // the one after a full event, to say it is caught up.
        if !batch.is_empty() || reader.ended() || state.first || state.behind {
            break;
        }
        // Caught up: wait for more, with a keepalive comment after a quiet while.
        if state.stop.is_cancelled() {
            return None;
        }
        let now = Instant::now();
        if now >= state.deadline {
            return None;
        }
        if now >= state.keepalive_at {
            state.keepalive_at = now + KEEPALIVE;
            state.first = false;
            let keepalive = Bytes::from_static(b": keepalive\n\n");
            return Some((Ok(keepalive), Some(state)));
        }
        reader.changed().await;
    }
    let closed = state.reader.ended();
    // Room for the batch as base64 (its longest form) and the control event: one allocation.
    let mut out = BytesMut::with_capacity(bytes + bytes / 3 + 256);
    if encoding == Encoding::Text {
        // Text goes out in whole characters and whole line breaks: an event is decoded on
        // its own, so a character split across appends waits for the rest of its bytes, and
        // a CR for the next byte (a CRLF is one line break).
        let mut text = std::mem::take(&mut state.held);
        batch.iter().for_each(|piece| text.extend_from_slice(piece));
        if !closed {
            state.held = text.split_off(text.len() - undecided_tail(&text));
        }
        if !text.is_empty() {
            data_event(&mut out, &[Bytes::from(text)], encoding);
        }
    } else if !batch.is_empty() {
        data_event(&mut out, &batch, encoding);
    }
    // Caught up when nothing more is committed right now.
    let up_to_date = closed || bytes < MAX_EVENT_BYTES;
    if let Some(from) = from
        && up_to_date
        && !closed
        && state.held.is_empty()
        && !out.is_empty()
        && out.len() <= MAX_SHARED_BYTES
        && state.reader.has_company()
    {
        let data = Bytes::copy_from_slice(&out);
        state.reader.leave_rendering(encoding as u8, from, data);
    }
    finish_event(&mut state, &mut out, up_to_date);
    Some((Ok(out.freeze()), (!closed).then_some(state)))
}

/// Ends an event with its control event, and moves `state` past it.
fn finish_event(state: &mut Events, out: &mut BytesMut, up_to_date: bool) {
    let Events {
        reader,
        cursor,
        first,
        behind,
        held,
        keepalive_at,
        ..
    } = state;
    // The request's cursor decided the first; later ones only keep up with the time.
    if !*first {
        *cursor = cursor::after(*cursor);
    }
    control_event(
        out,
        reader.position() - held.len() as u64,
        (!reader.ended()).then_some(*cursor),
        up_to_date,
        reader.ended_as(),
    );
    *first = false;
    *behind = !up_to_date;
    *keepalive_at = Instant::now() + KEEPALIVE;
}

/// Writes one `data` event holding `batch`.
fn data_event(out: &mut BytesMut, batch: &[Bytes], encoding: Encoding) {
    out.put_slice(b"event: data\n");
    match encoding {
        Encoding::Base64 => {
            let text = base64::engine::general_purpose::STANDARD.encode(joined(batch));
            data_lines(out, text.as_bytes());
        }
        Encoding::Json => {
            let array = json::array(batch.iter().map(|b| &b[..]));
            data_lines(out, &array);
        }
        Encoding::Text => data_lines(out, &joined(batch)),
    }
    out.put_u8(b'\n');
}

/// The pieces of `batch` as one run of bytes, copied only if there are several.
fn joined(batch: &[Bytes]) -> std::borrow::Cow<'_, [u8]> {
    match batch {
        [one] => std::borrow::Cow::Borrowed(one),
        several => std::borrow::Cow::Owned(several.concat()),
    }
}

/// Writes `payload` as `data:` lines: every CR, LF or CRLF in it starts a new line, so no
/// payload can end the event or forge another (a parser joins the lines with LF, so a CR or
/// CRLF arrives as LF). Every SSE parser removes one space after the colon, so a line that
/// starts with a space is written after the separator space (`data: ` + line) and keeps it;
/// other lines follow the colon directly, as the protocol's conformance suite expects.
fn data_lines(out: &mut BytesMut, payload: &[u8]) {
    let mut rest = payload;
    loop {
        let cut = rest.iter().position(|&b| b == b'\n' || b == b'\r');
        let line = &rest[..cut.unwrap_or(rest.len())];
        out.put_slice(b"data:");
        if line.first() == Some(&b' ') {
            out.put_u8(b' ');
        }
        out.put_slice(line);
        out.put_u8(b'\n');
        match cut {
            None => return,
            Some(at) => {
                let skip = if rest[at] == b'\r' && rest.get(at + 1) == Some(&b'\n') {
                    2
                } else {
                    1
                };
                rest = &rest[at + skip..];
            }
        }
    }
}

/// Writes the `control` event after a batch. Its JSON is written by hand, straight into
/// `out` and in the order a JSON map would sort it: every value is this server's own (an
/// offset, a cursor of digits, a status's name), and every reader gets one per event, so this
/// is on the fan-out's path. `streamNextOffset` is always there, so the names before it end
/// with a comma and those after it start with one.
fn control_event(
    out: &mut BytesMut,
    next: u64,
    cursor: Option<u64>,
    up_to_date: bool,
    ended_as: Option<Status>,
) {
    out.put_slice(b"event: control\ndata:{");
    if ended_as.is_some() {
        out.put_slice(b"\"streamClosed\":true,");
    }
    if let Some(cursor) = cursor {
        out.put_slice(b"\"streamCursor\":\"");
        out.put_slice(itoa::Buffer::new().format(cursor).as_bytes());
        out.put_slice(b"\",");
    }
    out.put_slice(b"\"streamNextOffset\":\"");
    Offset(next).put(out);
    out.put_u8(b'"');
    if let Some(status) = ended_as {
        // A tapedeck extension: how it ended (`cancelled` when stopped).
        out.put_slice(b",\"tapedeckEndedAs\":\"");
        out.put_slice(status.as_str().as_bytes());
        out.put_u8(b'"');
    }
    if up_to_date {
        out.put_slice(b",\"upToDate\":true");
    }
    out.put_slice(b"}\nid: ");
    Offset(next).put(out);
    out.put_slice(b"\n\n");
}

/// How many bytes at the end of `text` wait for the next byte before they can be sent: a CR
/// (it may start a CRLF), or the start of a UTF-8 character whose other bytes are missing.
fn undecided_tail(text: &[u8]) -> usize {
    if text.last() == Some(&b'\r') {
        return 1;
    }
    unfinished_character(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn line_breaks_in_payloads_cannot_forge_events() {
        let mut out = BytesMut::new();
        data_lines(&mut out, b"a\r\n\r\nevent: control\rdata: x\n\nb");
        assert_eq!(
            &out[..],
            b"data:a\ndata:\ndata:event: control\ndata:data: x\ndata:\ndata:b\n"
        );
    }

    #[test]
    fn a_line_that_starts_with_a_space_keeps_it_after_the_separator() {
        let mut out = BytesMut::new();
        data_lines(&mut out, b" world\n  two\nthree ");
        assert_eq!(&out[..], b"data:  world\ndata:   two\ndata:three \n");
    }

    #[test]
    fn a_control_event_is_the_json_a_map_would_write() {
        for (cursor, up_to_date, ended_as) in [
            (Some(3372577), true, None),
            (None, false, None),
            (None, true, Some(Status::Cancelled)),
            (Some(1), false, Some(Status::Completed)),
        ] {
            let mut out = BytesMut::new();
            control_event(&mut out, 5, cursor, up_to_date, ended_as);
            let text = std::str::from_utf8(&out).unwrap();
            let data = text
                .strip_prefix("event: control\ndata:")
                .and_then(|rest| rest.split_once('\n'))
                .map(|(data, rest)| {
                    assert_eq!(rest, format!("id: {}\n\n", Offset(5)));
                    data
                })
                .unwrap();
            let mut map = serde_json::Map::new();
            if ended_as.is_some() {
                map.insert("streamClosed".into(), true.into());
            }
            if let Some(cursor) = cursor {
                map.insert("streamCursor".into(), cursor.to_string().into());
            }
            map.insert("streamNextOffset".into(), Offset(5).to_string().into());
            if let Some(status) = ended_as {
                map.insert("tapedeckEndedAs".into(), status.as_str().into());
            }
            if up_to_date {
                map.insert("upToDate".into(), true.into());
            }
            assert_eq!(data, serde_json::Value::Object(map).to_string());
        }
    }

    #[test]
    fn a_trailing_cr_waits_for_the_next_byte() {
        assert_eq!(undecided_tail(b"line\r"), 1);
        assert_eq!(undecided_tail(b"line\r\n"), 0);
        assert_eq!(undecided_tail(b"line\n"), 0);
        assert_eq!(undecided_tail(&"x🦀".as_bytes()[..3]), 2);
    }
}
