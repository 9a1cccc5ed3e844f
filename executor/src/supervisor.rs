//! The job supervisor: applies each job's restart strategy when it fails, and restarts
//! its failover region from the latest checkpoint.
//!
//! A failure arrives from an actor (through [`crate::actor::JobHealth`]) or from the
//! checkpoint coordinator (too many failed checkpoints). The region of a view is the
//! view and every view that reads it, transitively (`region` failover); with `full`
//! failover every view restarts. Other views keep running and serving reads throughout.
//! A job past its strategy's limit is FAILED: its store stays frozen at its last
//! consistent contents until `ALTER MATERIALIZED VIEW ... RESUME`.

use crate::checkpoint::FailoverStrategy;
use crate::error::Result;
use crate::metrics::metrics;
use crate::runtime::Runtime;
use std::collections::HashMap;
use std::sync::{Arc, Weak};
use tokio::sync::mpsc::UnboundedReceiver;

pub(crate) fn spawn(
    rt: &Arc<Runtime>,
    mut failures: UnboundedReceiver<(u64, String)>,
    mut checkpoint_failures: UnboundedReceiver<(u64, String)>,
) {
    let weak = Arc::downgrade(rt);
    tokio::spawn(async move {
        while let Some((job, reason)) = failures.recv().await {
            let Some(rt) = weak.upgrade() else { return };
            on_failure(&rt, job, reason);
        }
    });
    let weak = Arc::downgrade(rt);
    tokio::spawn(async move {
        while let Some((job, reason)) = checkpoint_failures.recv().await {
            let Some(rt) = weak.upgrade() else { return };
            // Failing the job's health freezes its store and reports to `on_failure`.
            let found = rt
                .relations
                .write()
                .iter()
                .find(|(_, r)| r.job == job)
                .map(|(n, r)| (n.clone(), r.health.clone(), r.view.is_some()));
            match found {
                Some((_, h, true)) => h.fail(reason),
                // A table is its own log: nothing to restart. Its log is simply kept
                // until a checkpoint succeeds again.
                Some((name, _, false)) => {
                    tracing::error!(table = %name, %reason, "table checkpoints keep failing")
                }
                None => {}
            }
        }
    });
}

fn on_failure(rt: &Arc<Runtime>, job: u64, reason: String) {
    let Some((name, is_view)) = rt
        .relations
        .write()
        .iter()
        .find(|(_, r)| r.job == job)
        .map(|(n, r)| (n.clone(), r.view.is_some()))
    else {
        return;
    };
    let Some(delay) = rt.registry.on_failure(&name, &reason, is_view) else {
        tracing::error!(job = %name, %reason, "job FAILED: restart strategy exhausted");
        return;
    };
    tracing::warn!(job = %name, ?delay, %reason, "restarting job");
    metrics()
        .num_restarts
        .with_label_values(&[name.as_str()])
        .inc();
    let weak: Weak<Runtime> = Arc::downgrade(rt);
    tokio::spawn(async move {
        tokio::time::sleep(delay).await;
        let Some(rt) = weak.upgrade() else { return };
        if let Err(e) = restart(&rt, &name).await {
            tracing::error!(job = %name, error = %e, "restart failed");
            rt.registry.fail(&name, &format!("restart failed: {e}"));
        }
    });
}

/// The views to restart with `name`, upstream first.
fn region(rt: &Runtime, name: &str) -> Vec<String> {
    let relations = rt.relations.write();
    let full = rt.config.failover == FailoverStrategy::Full;
    // Creation order is not kept here; order by dependency instead.
    let mut chosen: Vec<String> = if full {
        relations
            .iter()
            .filter(|(_, r)| r.view.is_some())
            .map(|(n, _)| n.clone())
            .collect()
    } else {
        let mut v = vec![name.to_string()];
        let mut i = 0;
        while i < v.len() {
            let current = v[i].clone();
            for (n, r) in relations.iter() {
                if r.upstream.contains(&current) && !v.contains(n) {
                    v.push(n.clone());
                }
            }
            i += 1;
        }
        v
    };
    drop(relations);
    order_by_dependency(rt, std::mem::take(&mut chosen))
}

/// Topological order: a view after every other listed view it reads.
fn order_by_dependency(rt: &Runtime, mut chosen: Vec<String>) -> Vec<String> {
    let relations = rt.relations.write();
    let mut ordered = Vec::with_capacity(chosen.len());
    while !chosen.is_empty() {
        let before = chosen.len();
        let mut k = 0;
        while k < chosen.len() {
            let deps_ready = relations.get(&chosen[k]).is_none_or(|r| {
                r.upstream
                    .iter()
                    .all(|u| !chosen.contains(u) || ordered.contains(u))
            });
            if deps_ready {
                ordered.push(chosen.remove(k));
            } else {
                k += 1;
            }
        }
        if chosen.len() == before {
            ordered.append(&mut chosen);
        }
    }
    ordered
}

/// Longest a restart waits for a stopped job's last upload.
const UPLOADER_DRAIN: std::time::Duration = std::time::Duration::from_secs(10);

/// Restarts `name`'s region from the latest checkpoints. Reads of each view keep the
/// old (frozen) contents until the restarted job has caught up.
pub async fn restart(rt: &Arc<Runtime>, name: &str) -> Result<()> {
    restart_with(rt, &[name.to_string()], HashMap::new(), Vec::new()).await
}

/// Restarts the regions of `names` (every view that reads one of them too), each from
/// its latest checkpoint, except those given state in `given` (a savepoint). Tables in
/// `fill` (never written) get a savepoint's rows while their readers are stopped.
pub(crate) async fn restart_with(
    rt: &Arc<Runtime>,
    names: &[String],
    mut given: HashMap<String, crate::checkpoint::restore::RestoredJob>,
    fill: Vec<(String, crate::checkpoint::restore::RestoredJob)>,
) -> Result<()> {
    let mut w = rt.lock_writes().await;
    rt.flush_locked(&mut w).await?;
    let mut views: Vec<String> = Vec::new();
    for name in names {
        for v in region(rt, name) {
            if !views.contains(&v) {
                views.push(v);
            }
        }
    }
    // Dependency order across the merged regions.
    let views = order_by_dependency(rt, views);
    // Stop the whole region first: no barrier may wait on an actor that is going away.
    let mut stopped = Vec::new();
    let mut uploaders = Vec::new();
    for v in &views {
        let old = rt.relations.write().get(v).and_then(|r| {
            r.view.clone().map(|s| {
                (
                    s,
                    r.job,
                    r.actors,
                    r.upstream.clone(),
                    r.store.clone(),
                    r.serving.clone().unwrap_or(r.store.clone()),
                )
            })
        });
        let Some((spec, job, actors, upstream, store, old_store)) = old else {
            continue;
        };
        store.freeze();
        uploaders.extend(rt.teardown_job(job, actors, &upstream, &store));
        stopped.push((v.clone(), spec, job, old_store));
    }
    for (table, restored) in fill {
        uploaders.extend(rt.fill_table(&mut w, &table, restored)?);
    }
    // The stopped jobs' uploaders finish first (an upload in flight would otherwise
    // complete mid-restore and collect the files being read). Bounded: a stuck upload
    // (a stalled object store) must not hold the restart forever.
    for u in uploaders {
        let _ = tokio::time::timeout(UPLOADER_DRAIN, u).await;
    }
    // Then bring it back, upstream first, each committed before its dependents
    // backfill from it.
    for (v, spec, job, old_store) in stopped {
        let from = match given.remove(&v) {
            Some(r) => crate::deploy::Restore::From(Box::new(r)),
            None => crate::deploy::Restore::Latest,
        };
        let mut rel = crate::deploy::deploy_view(rt, &mut w, job, &v, spec, from).await?;
        rel.serving = Some(old_store);
        rt.relations.write().insert(v.clone(), rel);
        rt.flush_locked(&mut w).await?;
        // Swap reads over to the restarted job only if it caught up healthy; one that
        // failed again keeps serving the contents it had when it first failed.
        let healthy = match rt.relations.write().get_mut(&v) {
            Some(r) if r.health.failure().is_none() => {
                r.serving = None;
                true
            }
            _ => false,
        };
        // A job that failed again while catching up has been handled by `on_failure`.
        if healthy {
            rt.registry.running(&v);
        }
        tracing::info!(job = %v, "job restarted from its latest checkpoint");
    }
    Ok(())
}

/// `ALTER MATERIALIZED VIEW v RESUME`: restarts a FAILED (or running) view now and
/// gives its restart strategy a fresh start.
pub async fn resume(rt: &Arc<Runtime>, name: &str) -> Result<()> {
    rt.registry.resume(name)?;
    restart(rt, name).await
}
