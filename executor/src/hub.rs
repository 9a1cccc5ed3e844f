//! `RelationHub`: the output point of a table or view that other views subscribe to.
//!
//! Each of the relation's actors owns one slot in every subscription, so subscriptions
//! can be added and removed while the graph is quiescent (during DDL, under the write
//! lock, after a flush) without any actor having to be told. The list is copy-on-write:
//! actors read an `Arc` snapshot per message.
//!
//! The hub also remembers each upstream actor's last watermark per column: a view that
//! subscribes later is backfilled with rows behind it and must then be told it too,
//! since the relation may never move it again (a bounded source that ended, a table no
//! one writes): without it, the new view's windows would never close.

use crate::barrier::{Message, Watermark};
use crate::error::Result;
use crate::exchange::Dispatcher;
use parking_lot::RwLock;
use std::collections::BTreeMap;
use std::sync::Arc;

pub struct Subscription {
    pub job: u64,
    /// One dispatcher per upstream actor of the relation.
    pub per_upstream: Vec<Dispatcher>,
}

#[derive(Default)]
pub struct RelationHub {
    subscriptions: RwLock<Arc<Vec<Arc<Subscription>>>>,
    /// Per upstream actor: the last watermark it published, per column.
    watermarks: parking_lot::Mutex<Vec<BTreeMap<usize, Watermark>>>,
}

impl RelationHub {
    pub fn new() -> Arc<Self> {
        Arc::new(Self::default())
    }

    pub fn subscribe(&self, sub: Subscription) {
        let mut guard = self.subscriptions.write();
        let mut next: Vec<_> = guard.iter().cloned().collect();
        next.push(Arc::new(sub));
        *guard = Arc::new(next);
    }

    pub fn unsubscribe(&self, job: u64) {
        let mut guard = self.subscriptions.write();
        let next: Vec<_> = guard.iter().filter(|s| s.job != job).cloned().collect();
        *guard = Arc::new(next);
    }

    /// Sends a checkpoint barrier ahead of the data queued towards subscribers that run
    /// unaligned checkpoints (called where the barrier enters the source, before the
    /// relation's own queue).
    pub fn overtake(&self, barrier: &crate::barrier::Barrier) {
        let subs = self.subscriptions.read().clone();
        for sub in subs.iter() {
            for d in &sub.per_upstream {
                d.overtake(barrier);
            }
        }
    }

    /// The last watermarks upstream actor `upstream` published (read while the graph
    /// is quiescent, with the contents a new subscriber is backfilled with).
    pub fn watermarks(&self, upstream: usize) -> Vec<Watermark> {
        let all = self.watermarks.lock();
        all.get(upstream)
            .map(|by_column| by_column.values().cloned().collect())
            .unwrap_or_default()
    }

    fn remember(&self, upstream: usize, w: &Watermark) {
        let mut all = self.watermarks.lock();
        if all.len() <= upstream {
            all.resize_with(upstream + 1, BTreeMap::new);
        }
        all[upstream].insert(w.column, w.clone());
    }

    /// Delivers a message from upstream actor `upstream` to every subscriber. A
    /// subscriber that has gone away (its view was dropped) is skipped.
    pub async fn publish(&self, upstream: usize, msg: Message) -> Result<()> {
        if let Message::Watermark(w) = &msg {
            self.remember(upstream, w);
        }
        let subs = self.subscriptions.read().clone();
        for sub in subs.iter() {
            if let Some(d) = sub.per_upstream.get(upstream) {
                if d.dispatch(msg.clone()).await.is_err() {
                    tracing::debug!(job = sub.job, "subscriber gone");
                }
            }
        }
        Ok(())
    }
}
