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
    /// Held by the one thread committing: an epoch leaves `pending`, reaches the stores
    /// and is published before the next one. Acks come from any worker and from the
    /// log's sync thread; without this, a thread committing epoch n+1 could publish it
    /// before the thread that took n publishes n, moving the watch back to n. A FLUSH
    /// waiting for n+1 under the write lock would then wait forever, since no later
    /// barrier can start while it holds the lock.
    committing: Mutex<()>,
    actor_count: Mutex<usize>,
    stores: RwLock<Vec<Arc<RelationStore>>>,
    commit_lock: RwLock<()>,
    committed_tx: watch::Sender<Epoch>,
    /// Tests pause a committing thread here to force an interleaving.
    #[cfg(test)]
    before_publish: Mutex<Option<PublishHook>>,
}

#[cfg(test)]
type PublishHook = Arc<dyn Fn(Epoch) + Send + Sync>;

impl BarrierCoordinator {
    pub fn start(initial_epoch: Epoch) -> Arc<Self> {
        let (committed_tx, _) = watch::channel(initial_epoch);
        Arc::new(Self {
            pending: Mutex::new(Pending::default()),
            committing: Mutex::new(()),
            actor_count: Mutex::new(0),
            stores: RwLock::new(Vec::new()),
            commit_lock: RwLock::new(()),
            committed_tx,
            #[cfg(test)]
            before_publish: Mutex::new(None),
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
        let _one_committer = self.committing.lock();
        while let Some(epoch) = self.take_ready() {
            self.commit_stores(epoch);
            #[cfg(test)]
            self.run_before_publish(epoch);
            self.committed_tx.send_replace(epoch);
        }
    }

    #[cfg(test)]
    fn run_before_publish(&self, epoch: Epoch) {
        let hook = self.before_publish.lock().clone(); // not held while the hook runs
        if let Some(hook) = hook {
            hook(epoch);
        }
    }

    /// Takes the first in-flight epoch off the list if all its acks are in.
    fn take_ready(&self) -> Option<Epoch> {
        let mut p = self.pending.lock();
        match p.outstanding.first_key_value() {
            Some((&e, &0)) => {
                p.outstanding.remove(&e);
                Some(e)
            }
            _ => None,
        }
    }

    fn commit_stores(&self, epoch: Epoch) {
        let _w = self.commit_lock.write();
        for s in self.stores.read().iter() {
            if let Err(e) = s.commit(epoch) {
                tracing::error!(store = s.name(), error = %e, "commit failed");
            }
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

    /// Two threads give the last acks of epochs 1 and 2 at once; the one committing 1
    /// is paused before it publishes. The published epoch must end at 2 and a wait
    /// for 2 must return. Before `committing`, the second thread
    /// published 2 during the pause and the first then published 1 over it.
    #[test]
    fn concurrent_last_acks_publish_epochs_in_order() {
        use std::sync::mpsc;
        use std::time::Duration;
        let c = BarrierCoordinator::start(0);
        c.add_actors(1);
        c.begin_epoch(1, false);
        c.begin_epoch(2, false);
        let (paused_tx, paused_rx) = mpsc::channel();
        let (release_tx, release_rx) = mpsc::channel::<()>();
        let release_rx = Mutex::new(release_rx);
        *c.before_publish.lock() = Some(Arc::new(move |epoch| {
            if epoch == 1 {
                paused_tx.send(()).unwrap();
                release_rx.lock().recv().unwrap();
            }
        }));
        let acks = c.ack_sender();
        let first = {
            let acks = acks.clone();
            std::thread::spawn(move || acks(BarrierAck { epoch: 1, actor: 1 }))
        };
        paused_rx.recv().unwrap(); // epoch 1 is off the list, not yet published
        let second = std::thread::spawn(move || acks(BarrierAck { epoch: 2, actor: 1 }));
        std::thread::sleep(Duration::from_millis(100)); // room for a racing publish
        release_tx.send(()).unwrap();
        first.join().unwrap();
        second.join().unwrap();
        assert_eq!(c.committed_epoch(), 2, "the watch ends at the last epoch");
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .unwrap();
        rt.block_on(async {
            tokio::time::timeout(Duration::from_secs(1), c.wait_committed(2))
                .await
                .expect("a wait for epoch 2 returns");
        });
    }
}
