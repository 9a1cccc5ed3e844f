//! Failpoints: named switches that tests flip to inject failures (kill an actor, fail or
//! stall an object-store call, slow an operator). They are inert unless the process was
//! started with `WEIR_FAILPOINTS=1`, so a production server cannot be told to fail.

use parking_lot::RwLock;
use std::collections::HashMap;
use std::sync::OnceLock;

fn registry() -> &'static RwLock<HashMap<String, String>> {
    static R: OnceLock<RwLock<HashMap<String, String>>> = OnceLock::new();
    R.get_or_init(|| RwLock::new(HashMap::new()))
}

/// True when this process accepts failpoints.
pub fn enabled() -> bool {
    static E: OnceLock<bool> = OnceLock::new();
    *E.get_or_init(|| std::env::var("WEIR_FAILPOINTS").is_ok_and(|v| v == "1"))
}

/// Sets (non-empty action) or clears (empty action) a failpoint.
pub fn set(name: &str, action: &str) {
    let mut r = registry().write();
    if action.is_empty() || action == "off" {
        r.remove(name);
    } else {
        r.insert(name.to_string(), action.to_string());
    }
}

/// The action of a failpoint, if it is set. Cheap when no failpoint is set.
pub fn get(name: &str) -> Option<String> {
    if !enabled() {
        return None;
    }
    let r = registry().read();
    if r.is_empty() {
        return None;
    }
    r.get(name).cloned()
}

/// Like [`get`], but clears the failpoint when its action is `once`.
pub fn take_once(name: &str) -> Option<String> {
    let action = get(name)?;
    if action == "once" {
        registry().write().remove(name);
    }
    Some(action)
}
