//! `BarrierCoordinator`: counts barrier acknowledgements and commits epochs.
//!
//! Barriers are injected at the sources (see [`crate::runtime::Runtime::inject_barrier`]);
//! every actor acknowledges each barrier after forwarding it. When all actors that
//! existed at injection time have acknowledged epoch `n` (and every earlier epoch is
//! committed), the coordinator commits `n` into every relation store under the commit
//! lock and publishes it on a watch channel that `FLUSH` and reads wait on.
//!
//! An epoch whose barrier passed table-log entries not yet on disk (group commit)
//! also waits for them: [`BarrierCoordinator::begin_epoch`] counts the log sync as one
//! more acknowledgement, given by [`BarrierCoordinator::ack_durable`], so nothing
//! readable is ever lost in a crash.

use crate::actor::{AckSink, BarrierAck};
use crate::barrier::Epoch;
use crate::store::RelationStore;
use parking_lot::{Mutex, RwLock, RwLockReadGuard};
use std::collections::BTreeMap;
use std::sync::Arc;
use tokio::sync::watch;

#[derive(Default)]
struct Pending {
    /// Acks still expected per in-flight epoch.
    outstanding: BTreeMap<Epoch, usize>,
}

pub struct BarrierCoordinator {
    pending: Mutex<Pending>,
    actor_count: Mutex<usize>,
    stores: RwLock<Vec<Arc<RelationStore>>>,
    commit_lock: RwLock<()>,
    committed_tx: watch::Sender<Epoch>,
}

impl BarrierCoordinator {
    pub fn start(initial_epoch: Epoch) -> Arc<Self> {
        let (committed_tx, _) = watch::channel(initial_epoch);
        Arc::new(Self {
            pending: Mutex::new(Pending::default()),
            actor_count: Mutex::new(0),
            stores: RwLock::new(Vec::new()),
            commit_lock: RwLock::new(()),
            committed_tx,
        })
    }

    /// The sink actors report forwarded barriers to (weak: actors do not keep a
    /// stopped runtime's coordinator alive).
    pub fn ack_sender(self: &Arc<Self>) -> AckSink {
        let weak = Arc::downgrade(self);
        Arc::new(move |ack| {
            if let Some(coord) = weak.upgrade() {
                coord.on_ack(ack);
            }
        })
    }

    pub fn add_actors(&self, n: usize) {
        *self.actor_count.lock() += n;
    }

    pub fn remove_actors(&self, n: usize) {
        *self.actor_count.lock() -= n;
    }

    pub fn register_store(&self, store: Arc<RelationStore>) {
        self.stores.write().push(store);
    }

    pub fn unregister_store(&self, store: &Arc<RelationStore>) {
        self.stores.write().retain(|s| !Arc::ptr_eq(s, store));
    }

    /// Records that barrier `epoch` is being injected now. Must be called before the
    /// barrier is sent, while the graph cannot change (under the write lock).
    /// `awaits_sync`: the epoch also waits for [`BarrierCoordinator::ack_durable`].
    pub fn begin_epoch(&self, epoch: Epoch, awaits_sync: bool) {
        let n = *self.actor_count.lock() + usize::from(awaits_sync);
        self.pending.lock().outstanding.insert(epoch, n);
        if n == 0 {
            self.try_commit();
        }
    }

    /// The table-log entries barrier `epoch` passed are on disk.
    pub fn ack_durable(&self, epoch: Epoch) {
        {
            let mut p = self.pending.lock();
            match p.outstanding.get_mut(&epoch) {
                Some(n) if *n > 0 => *n -= 1,
                _ => {
                    tracing::warn!(epoch, "unexpected durability ack");
                    return;
                }
            }
        }
        self.try_commit();
    }

    fn on_ack(&self, ack: BarrierAck) {
        {
            let mut p = self.pending.lock();
            match p.outstanding.get_mut(&ack.epoch) {
                Some(n) if *n > 0 => *n -= 1,
                _ => {
                    tracing::warn!(epoch = ack.epoch, actor = ack.actor, "unexpected ack");
                    return;
                }
            }
        }
        self.try_commit();
    }

    /// Commits every leading epoch whose acks are all in, in order.
    fn try_commit(&self) {
        loop {
            let ready = {
                let mut p = self.pending.lock();
                match p.outstanding.first_key_value() {
                    Some((&e, &0)) => {
                        p.outstanding.remove(&e);
                        Some(e)
                    }
                    _ => None,
                }
            };
            let Some(epoch) = ready else { return };
            {
                let _w = self.commit_lock.write();
                for s in self.stores.read().iter() {
                    if let Err(e) = s.commit(epoch) {
                        tracing::error!(store = s.name(), error = %e, "commit failed");
                    }
                }
            }
            self.committed_tx.send_replace(epoch);
        }
    }

    pub fn committed_epoch(&self) -> Epoch {
        *self.committed_tx.borrow()
    }

    /// Waits until `epoch` is committed.
    pub async fn wait_committed(&self, epoch: Epoch) {
        let mut rx = self.committed_tx.subscribe();
        let _ = rx.wait_for(|e| *e >= epoch).await;
    }

    /// Held while taking a consistent snapshot of several stores.
    pub fn read_lock(&self) -> RwLockReadGuard<'_, ()> {
        self.commit_lock.read()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn epochs_commit_in_order_once_every_actor_and_the_log_acked() {
        let c = BarrierCoordinator::start(0);
        c.add_actors(2);
        let acks = c.ack_sender();
        let ack = |epoch, actor| acks(BarrierAck { epoch, actor });
        c.begin_epoch(1, true); // waits for the log sync too
        c.begin_epoch(2, false);
        // Epoch 2 complete first: it still waits for epoch 1.
        ack(2, 1);
        ack(2, 2);
        ack(1, 1);
        ack(1, 2);
        assert_eq!(c.committed_epoch(), 0, "epoch 1 waits for its log sync");
        c.ack_durable(1);
        assert_eq!(c.committed_epoch(), 2, "the sync commits 1 and then 2");
        // An ack of an unknown epoch, or one too many, changes nothing.
        ack(7, 1);
        c.ack_durable(2);
        c.begin_epoch(3, false);
        ack(3, 1);
        assert_eq!(c.committed_epoch(), 2, "one actor of two acked epoch 3");
        ack(3, 2);
        c.wait_committed(3).await;
        // With no actors and nothing to sync, an epoch commits at once.
        c.remove_actors(2);
        c.begin_epoch(4, false);
        assert_eq!(c.committed_epoch(), 4);
    }
}
