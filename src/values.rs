//! The values flags take: durations (humantime), sizes (parse-size), listen addresses and
//! grant entries, each refused with a message that says what would be accepted, and each
//! shown (in `--help` and the logs) as a person would write it.
use std::net::{SocketAddr, ToSocketAddrs};
use std::time::Duration;

use tapedeck::access::Role;

/// A size in bytes, written with a binary unit when it has one (`1MiB`).
#[derive(Clone, Copy)]
pub(crate) struct Bytes(pub(crate) u64);

impl std::fmt::Display for Bytes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let units = [(1u64 << 30, "GiB"), (1 << 20, "MiB"), (1 << 10, "KiB")];
        match units
            .iter()
            .find(|(unit, _)| self.0 > 0 && self.0.is_multiple_of(*unit))
        {
            Some((unit, name)) => write!(f, "{}{name}", self.0 / unit),
            None => write!(f, "{}", self.0),
        }
    }
}

/// An address to listen on; a host name is resolved, and its first address used.
pub(crate) fn parse_listen(text: &str) -> Result<SocketAddr, String> {
    let mut addrs = text
        .to_socket_addrs()
        .map_err(|err| format!("`{text}` is not a host:port to listen on ({err})"))?;
    addrs
        .next()
        .ok_or_else(|| format!("`{text}` resolves to no address"))
}

/// The HTTP face's address: a host:port, or `off`.
pub(crate) fn parse_http_listen(text: &str) -> Result<HttpListen, String> {
    match text {
        "off" => Ok(HttpListen(None)),
        text => parse_listen(text)
            .map(|addr| HttpListen(Some(addr)))
            .map_err(|err| format!("{err}; `off` turns the HTTP face off")),
    }
}

/// `--http-listen`: an address, or off.
#[derive(Debug, Clone, Copy)]
pub(crate) struct HttpListen(pub(crate) Option<SocketAddr>);

impl std::fmt::Display for HttpListen {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.0 {
            Some(addr) => addr.fmt(f),
            None => f.write_str("off"),
        }
    }
}

/// An address other instances redirect clients to: `host:port`, with a port of 1-65535 and a
/// host someone can dial (not `0.0.0.0` or `::`, which only a listener understands). Not
/// resolved: it names this instance as the others see it.
pub(crate) fn parse_advertised(text: &str) -> Result<String, String> {
    let wrong = || format!("`{text}` is not a host:port that other instances can redirect to");
    let (host, port) = text.rsplit_once(':').ok_or_else(wrong)?;
    let port_ok = port.parse::<u16>().is_ok_and(|port| port > 0);
    let host_ok = !host.is_empty()
        && !host.contains("://")
        && !host.contains(|c: char| c.is_whitespace() || c == '/' || c == '@');
    if !(port_ok && host_ok) {
        return Err(wrong());
    }
    let ip = host.trim_start_matches('[').trim_end_matches(']');
    if ip
        .parse::<std::net::IpAddr>()
        .is_ok_and(|ip| ip.is_unspecified())
    {
        return Err(format!(
            "`{text}` names no host: a client cannot dial {host}; advertise an address of this \
             instance that others can reach, e.g. its host name or IP"
        ));
    }
    Ok(text.to_string())
}

/// A duration, shown in the units a person writes (`7d`, `1h 30m`, `4ms`), which
/// [`parse_duration`] reads back.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Period(pub(crate) Duration);

impl From<Period> for Duration {
    fn from(period: Period) -> Duration {
        period.0
    }
}

impl std::fmt::Display for Period {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        const UNITS: [(u128, &str); 7] = [
            (86_400_000_000_000, "d"),
            (3_600_000_000_000, "h"),
            (60_000_000_000, "m"),
            (1_000_000_000, "s"),
            (1_000_000, "ms"),
            (1_000, "us"),
            (1, "ns"),
        ];
        let mut rest = self.0.as_nanos();
        if rest == 0 {
            return f.write_str("0s");
        }
        let mut first = true;
        for (size, name) in UNITS {
            let count = rest / size;
            if count > 0 {
                let gap = if first { "" } else { " " };
                write!(f, "{gap}{count}{name}")?;
                rest %= size;
                first = false;
            }
        }
        Ok(())
    }
}

/// A duration such as `90s`, `30m`, `1.5h`, `2d` or `250ms`, parsed by humantime; at most
/// what the store can count in u64 milliseconds.
pub(crate) fn parse_duration(text: &str) -> Result<Period, String> {
    let duration = text
        .parse::<humantime::Duration>()
        .map_err(|err| duration_error(text, &err))?;
    if Duration::from(duration).as_millis() > u128::from(u64::MAX) {
        return Err(format!("`{text}` is too large to count in milliseconds"));
    }
    Ok(Period(duration.into()))
}

/// Why `text` is not a duration, naming the units the README documents rather than every
/// spelling humantime also takes.
fn duration_error(text: &str, err: &humantime::DurationError) -> String {
    const UNITS: &str = "write a number and a unit of ms, s, m, h or d, like 90s, 30m or 1.5h";
    match err {
        humantime::DurationError::NumberOverflow => format!("`{text}` is too large"),
        humantime::DurationError::UnknownUnit { unit, .. } if !unit.is_empty() => {
            format!("`{text}` is not a duration: unknown unit `{unit}`; {UNITS}")
        }
        _ => format!("`{text}` is not a duration: {UNITS}"),
    }
}

/// As [`parse_duration`], refusing zero.
pub(crate) fn parse_positive_duration(text: &str) -> Result<Period, String> {
    let duration = parse_duration(text)?;
    if duration.0.is_zero() {
        return Err("it must be more than zero".into());
    }
    Ok(duration)
}

/// The group commit interval: a duration of at most a second (every commit of several
/// producers' tokens waits up to that long, and their acknowledgements with it).
pub(crate) fn parse_commit_interval(text: &str) -> Result<Period, String> {
    let duration = parse_duration(text)?;
    if duration.0 > Duration::from_secs(1) {
        return Err(format!(
            "`{text}` is too long: commits would hold producers and readers back by up to that; at most 1s (a few ms is usual)"
        ));
    }
    Ok(duration)
}

/// A chunk size: more than zero, and less than 4 GiB so that a chunk fits in one gRPC message
/// (whose length is 32 bits).
pub(crate) fn parse_chunk_size(text: &str) -> Result<Bytes, String> {
    let size = parse_positive_size(text)?;
    if size.0 >= 1 << 32 {
        return Err(format!(
            "`{text}` is too large: a chunk travels in one gRPC message, under 4GiB"
        ));
    }
    Ok(size)
}

/// A size more than zero, such as `4096`, `512KiB` or `1MiB`, parsed by parse-size.
pub(crate) fn parse_positive_size(text: &str) -> Result<Bytes, String> {
    match parse_size::parse_size(text) {
        Ok(0) => Err("it must be more than zero".into()),
        Ok(bytes) => Ok(Bytes(bytes)),
        Err(err) => Err(format!(
            "`{text}` is not a size like 4096, 512KiB or 1MiB: {err}"
        )),
    }
}

/// `ID=reader` or `ID=writer`.
pub(crate) fn parse_grant(text: &str) -> Result<(String, Role), String> {
    let (id, role) = text
        .rsplit_once('=')
        .ok_or_else(|| format!("`{text}` is not ID=reader or ID=writer"))?;
    let role = match role {
        "reader" => Role::Reader,
        "writer" => Role::Writer,
        other => return Err(format!("unknown role `{other}`; use reader or writer")),
    };
    Ok((id.to_string(), role))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_are_shown_in_short_units_that_parse_back() {
        for (duration, shown) in [
            (Duration::from_secs(7 * 86_400), "7d"),
            (Duration::from_secs(86_400), "1d"),
            (Duration::from_secs(5_400), "1h 30m"),
            (Duration::from_millis(4), "4ms"),
            (Duration::from_millis(1_500), "1s 500ms"),
            (Duration::ZERO, "0s"),
        ] {
            assert_eq!(Period(duration).to_string(), shown);
            assert_eq!(parse_duration(shown), Ok(Period(duration)));
        }
    }

    #[test]
    fn a_duration_refused_names_the_documented_units_only() {
        let err = parse_duration("5x").unwrap_err();
        assert!(err.contains("unknown unit `x`"), "{err}");
        assert!(err.contains("ms, s, m, h or d"), "{err}");
        assert!(!err.contains("years"), "{err}");
        let err = parse_duration("3").unwrap_err();
        assert!(!err.contains("unknown unit"), "{err}");
    }
}
