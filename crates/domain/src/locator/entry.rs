//! A locator entry: which instance holds a conversation's recording, where to reach it, and
//! whether it is live; with the two scripts that write and remove entries so that an older
//! owner never overwrites or removes a newer owner's entry.
/// Prefix of every key tapedeck writes.
const PREFIX: &str = "tapedeck:";

/// The Redis key of conversation `key`'s entry (a hash).
pub(super) fn entry_key(key: u128) -> String {
    format!("{PREFIX}rec:{key:032x}")
}

/// The key under which instance `instance` announces its address while it runs.
pub(super) fn instance_key(instance: &str) -> String {
    format!("{PREFIX}instance:{instance}")
}

/// The pattern of every instance's announcement key.
pub(super) const INSTANCE_PATTERN: &str = "tapedeck:instance:*";

/// The instance id in announcement key `key`.
pub(super) fn instance_of(key: &str) -> Option<&str> {
    key.strip_prefix(PREFIX)?.strip_prefix("instance:")
}

/// The pub/sub channel instance `instance` listens on.
pub(super) fn inbox(instance: &str) -> String {
    format!("{PREFIX}inbox:{instance}")
}

/// One instance's claim on a conversation, as written to its entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Claim {
    /// The claiming instance's id (its inbox).
    pub instance: String,
    /// The address other instances redirect to (`--advertised-address`).
    pub address: String,
    /// Where other instances send HTTP requests (`--advertised-http-address`); may be empty.
    pub http: String,
    /// Unique per recording: `instance:generation`. Compare-and-delete checks it.
    pub owner: String,
    /// When the recording started, in ms since the epoch: the later start is the newer owner.
    pub started_ms: u64,
    /// `recording` while live, else how it ended.
    pub status: &'static str,
    /// How long the entry lives unless written again, in ms.
    pub ttl_ms: u64,
}

/// The entry a claim replaced, when it belonged to someone else.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Replaced {
    /// The previous owner's instance.
    pub instance: String,
    /// The previous owner's token.
    pub owner: String,
    /// Whether that recording was live.
    pub live: bool,
}

/// What a claim did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Claimed {
    /// Written; it may have replaced another owner's entry.
    Written(Option<Replaced>),
    /// Refused: a newer recording of the conversation holds the entry, on `by`.
    Refused { by: String },
}

/// An entry as read back: enough to redirect to its owner.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Owner {
    /// The owner's instance id.
    pub instance: String,
    /// The owner's advertised address, `host:port`.
    pub address: String,
    /// The owner's HTTP face, `host:port`, when it advertises one.
    pub http: Option<String>,
    /// Whether the recording is live there.
    pub live: bool,
}

/// Writes a claim unless a newer one holds the entry. The order is (started, owner): the
/// recording that started later wins; equal starts are ordered by owner token, so that every
/// instance agrees. The same owner always rewrites its own entry (refresh, status change).
/// Returns {1, previous instance, previous owner, previous status} or {0, holder address}.
const CLAIM: &str = r"
local cur = redis.call('HMGET', KEYS[1], 'owner', 'started', 'instance', 'status', 'address')
local owner, started = ARGV[1], tonumber(ARGV[2])
if cur[1] and cur[1] ~= owner then
  local held = tonumber(cur[2]) or 0
  if held > started or (held == started and cur[1] > owner) then
    return {0, cur[5] or ''}
  end
end
redis.call('HSET', KEYS[1], 'owner', owner, 'started', ARGV[2], 'instance', ARGV[3],
  'address', ARGV[4], 'status', ARGV[5], 'http', ARGV[7] or '')
redis.call('PEXPIRE', KEYS[1], ARGV[6])
if cur[1] and cur[1] ~= owner then
  return {1, cur[3] or '', cur[1], cur[4] or ''}
end
return {1}
";

/// Deletes the entry only if `owner` still holds it.
const RELEASE: &str = r"
if redis.call('HGET', KEYS[1], 'owner') == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
";

/// A Lua script and its SHA-1, called with `EVALSHA`.
pub(super) struct Lua {
    source: &'static str,
    sha: String,
}

impl Lua {
    fn new(source: &'static str) -> Self {
        let sha = redis::Script::new(source).get_hash().to_string();
        Self { source, sha }
    }
}

/// The claim script.
pub(super) fn claim_script() -> Lua {
    Lua::new(CLAIM)
}

/// The compare-and-delete script.
pub(super) fn release_script() -> Lua {
    Lua::new(RELEASE)
}

/// Adds loading `script` to `pipe`, so that the script calls after it in the same pipeline
/// find it even on a Redis that restarted empty; its answer is ignored.
pub(super) fn add_load(pipe: &mut redis::Pipeline, script: &Lua) {
    pipe.cmd("SCRIPT").arg("LOAD").arg(script.source).ignore();
}

/// Adds `claim` of conversation `key` to `pipe` as one script call.
pub(super) fn add_claim(pipe: &mut redis::Pipeline, script: &Lua, key: u128, claim: &Claim) {
    pipe.cmd("EVALSHA")
        .arg(&script.sha)
        .arg(1)
        .arg(entry_key(key))
        .arg(&claim.owner)
        .arg(claim.started_ms)
        .arg(&claim.instance)
        .arg(&claim.address)
        .arg(claim.status)
        .arg(claim.ttl_ms.max(1))
        .arg(&claim.http);
}

/// Adds the compare-and-delete of conversation `key`'s entry, if `owner` holds it, to `pipe`.
pub(super) fn add_release(pipe: &mut redis::Pipeline, script: &Lua, key: u128, owner: &str) {
    pipe.cmd("EVALSHA")
        .arg(&script.sha)
        .arg(1)
        .arg(entry_key(key))
        .arg(owner);
}

/// Reads a claim script's answer.
pub(super) fn claimed(answer: &[redis::Value]) -> Claimed {
    let text = |i: usize| match answer.get(i) {
        Some(redis::Value::BulkString(bytes)) => String::from_utf8_lossy(bytes).into_owned(),
        Some(redis::Value::SimpleString(text)) => text.clone(),
        _ => String::new(),
    };
    match answer.first() {
        Some(redis::Value::Int(1)) if answer.len() >= 4 => Claimed::Written(Some(Replaced {
            instance: text(1),
            owner: text(2),
            live: text(3) == "recording",
        })),
        Some(redis::Value::Int(1)) => Claimed::Written(None),
        _ => Claimed::Refused { by: text(1) },
    }
}

/// Reads an entry's `instance`, `address`, `status` and `http` fields, as `HMGET` returns
/// them.
pub(super) fn owner(fields: Vec<Option<String>>) -> Option<Owner> {
    let mut fields = fields.into_iter();
    let (Some(Some(instance)), Some(Some(address)), Some(status)) =
        (fields.next(), fields.next(), fields.next())
    else {
        return None;
    };
    Some(Owner {
        instance,
        address,
        // Entries of earlier builds have no `http`; an empty one advertises none.
        http: fields.next().flatten().filter(|http| !http.is_empty()),
        live: status.as_deref() == Some("recording"),
    })
}

/// The fields [`owner`] reads, in order.
pub(super) const OWNER_FIELDS: [&str; 4] = ["instance", "address", "status", "http"];

#[cfg(test)]
mod tests {
    use super::*;
    use redis::Value;

    fn text(s: &str) -> Value {
        Value::BulkString(s.as_bytes().to_vec())
    }

    #[test]
    fn claim_answers_are_read() {
        assert_eq!(claimed(&[Value::Int(1)]), Claimed::Written(None));
        let replaced = [Value::Int(1), text("b"), text("b:3"), text("recording")];
        assert_eq!(
            claimed(&replaced),
            Claimed::Written(Some(Replaced {
                instance: "b".into(),
                owner: "b:3".into(),
                live: true,
            }))
        );
        let refused = [Value::Int(0), text("10.0.0.2:9090")];
        assert_eq!(
            claimed(&refused),
            Claimed::Refused {
                by: "10.0.0.2:9090".into()
            }
        );
    }

    #[test]
    fn an_entry_missing_fields_names_no_owner() {
        let full = vec![
            Some("a".into()),
            Some("h:1".into()),
            Some("completed".into()),
            Some("h:2".into()),
        ];
        assert_eq!(
            owner(full),
            Some(Owner {
                instance: "a".into(),
                address: "h:1".into(),
                http: Some("h:2".into()),
                live: false
            })
        );
        let no_http = vec![
            Some("a".into()),
            Some("h:1".into()),
            None,
            Some(String::new()),
        ];
        assert_eq!(owner(no_http).unwrap().http, None);
        assert_eq!(owner(vec![None, None, None, None]), None);
    }
}
