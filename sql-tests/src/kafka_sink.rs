//! Reading what an exactly-once Kafka sink committed, without trusting the broker to
//! hide aborted transactions (tansu shows them to `read_committed` readers): the sink's
//! commit chain is followed instead. With the commit marker (the last batch, the offset
//! the sink commits in each transaction to its consumer group) each transaction commits
//! its attempt number to a second group, and every record names in `weir.prev` the
//! committed attempt it follows. Walking back from the marker gives exactly the
//! committed attempts; their batches must be numbered on from 0 to the marker with no
//! batch committed twice and no gap. Attempts off the chain are aborted ones.

use crate::kafka::{broker, read_messages};
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::{Headers, Message};
use std::collections::BTreeMap;
use std::time::Duration;

/// The committed output of an exactly-once sink: its batches in commit order.
pub struct Committed {
    pub batches: Vec<(u64, Vec<String>)>,
    /// Attempts off the chain (aborted transactions tansu shows).
    pub aborted_attempts: usize,
}

impl Committed {
    pub fn records(&self) -> impl Iterator<Item = String> + '_ {
        self.batches.iter().flat_map(|(_, r)| r.iter().cloned())
    }
}

fn header(m: &rdkafka::message::OwnedMessage, key: &str) -> String {
    let h = m.headers().expect("sink records carry headers");
    (0..h.count())
        .map(|i| h.get(i))
        .find(|h| h.key == key)
        .and_then(|h| h.value)
        .map(|v| String::from_utf8_lossy(v).into_owned())
        .unwrap_or_else(|| panic!("no {key} header"))
}

/// The offset `group` committed for partition 0 of `topic`, if any.
fn committed_offset(topic: &str, group: &str) -> Option<i64> {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", broker())
        .set("group.id", group)
        .set("enable.auto.commit", "false")
        .create()
        .expect("consumer");
    let mut tpl = rdkafka::TopicPartitionList::new();
    tpl.add_partition(topic, 0);
    let committed = consumer
        .committed_offsets(tpl, Duration::from_secs(10))
        .expect("committed offsets");
    let e = committed.elements().into_iter().next()?;
    match e.offset() {
        rdkafka::Offset::Offset(n) if n >= 0 => Some(n),
        _ => None,
    }
}

/// The sink's commit marker (the last committed batch) and the attempt that committed
/// it (the offset of the marker group's `.attempt` twin, committed in the same
/// transaction).
fn marker(topic: &str, group: &str) -> Option<(u64, String)> {
    let batch = committed_offset(topic, group)?;
    let attempt = committed_offset(topic, &format!("{group}.attempt"))
        .expect("a commit marker without the attempt that committed it");
    Some((batch as u64, attempt.to_string()))
}

/// One transaction attempt as read: the attempt it follows, and its batches in order.
#[derive(Default)]
struct Attempt {
    prev: String,
    batches: Vec<(u64, Vec<String>)>,
}

/// The committed batches of `topic`, found by walking the commit chain back from the
/// marker of `group`; panics on a batch committed twice, a gap, or a broken chain.
pub fn committed(topic: &str, group: &str) -> Committed {
    // The marker is read before the records (an attempt's records are written before it
    // commits, so every attempt up to the marker is then in what is read) and again
    // after, until a sink that is still committing stood still meanwhile: its two
    // offsets are read one after the other.
    let (messages, marker) = loop {
        let before = marker(topic, group);
        let messages = read_messages(topic);
        if marker(topic, group) == before {
            break (messages, before);
        }
    };
    let mut attempts: BTreeMap<String, Attempt> = BTreeMap::new();
    for m in messages {
        let batch: u64 = header(&m, "weir.batch").parse().expect("batch number");
        let payload = String::from_utf8_lossy(m.payload().unwrap_or_default()).into_owned();
        let a = attempts.entry(header(&m, "weir.txn")).or_default();
        a.prev = header(&m, "weir.prev");
        match a.batches.last_mut() {
            Some((b, records)) if *b == batch => records.push(payload),
            _ => a.batches.push((batch, vec![payload])),
        }
    }
    let Some((last, mut at)) = marker else {
        assert!(attempts.is_empty(), "{topic}: records but no commit marker");
        return Committed {
            batches: Vec::new(),
            aborted_attempts: 0,
        };
    };
    let mut chain = Vec::new();
    while !at.is_empty() {
        let a = attempts
            .remove(&at)
            .unwrap_or_else(|| panic!("{topic}: the committed attempt {at} has no records"));
        at = a.prev.clone();
        chain.push(a);
    }
    let batches: Vec<(u64, Vec<String>)> =
        chain.into_iter().rev().flat_map(|a| a.batches).collect();
    let numbers: Vec<u64> = batches.iter().map(|(b, _)| *b).collect();
    assert_eq!(
        numbers,
        (0..=last).collect::<Vec<_>>(),
        "{topic}: the committed batches are not 0..={last} once each (a batch committed twice, or a gap)"
    );
    Committed {
        batches,
        aborted_attempts: attempts.len(),
    }
}

/// The committed output of `topic` once `done` holds of it (the sink commits after
/// checkpoints, asynchronously).
pub async fn wait_committed(
    topic: &str,
    group: &str,
    done: impl Fn(&Committed) -> bool,
) -> Committed {
    for _ in 0..300 {
        let c = committed(topic, group);
        if done(&c) {
            return c;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let c = committed(topic, group);
    assert!(done(&c), "the sink {topic} did not catch up");
    c
}
