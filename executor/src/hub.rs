//! `RelationHub`: the output point of a table or view that other views subscribe to.
//!
//! Each of the relation's actors owns one slot in every subscription, so subscriptions
//! can be added and removed while the graph is quiescent (during DDL, under the write
//! lock, after a flush) without any actor having to be told. The list is copy-on-write:
//! actors read an `Arc` snapshot per message.

use crate::barrier::Message;
use crate::error::Result;
use crate::exchange::Dispatcher;
use parking_lot::RwLock;
use std::sync::Arc;

pub struct Subscription {
    pub job: u64,
    /// One dispatcher per upstream actor of the relation.
    pub per_upstream: Vec<Dispatcher>,
}

#[derive(Default)]
pub struct RelationHub {
    subscriptions: RwLock<Arc<Vec<Arc<Subscription>>>>,
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

    /// Delivers a message from upstream actor `upstream` to every subscriber. A
    /// subscriber that has gone away (its view was dropped) is skipped.
    pub async fn publish(&self, upstream: usize, msg: Message) -> Result<()> {
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
