//! Small query helpers for integration tests: rows as strings, one value, errors.

use tokio_postgres::{Client, SimpleQueryMessage};

/// Every row of `sql`'s result as text (NULL as "NULL").
pub async fn rows(client: &Client, sql: &str) -> Vec<Vec<String>> {
    try_rows(client, sql)
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"))
}

/// [`rows`], or the server's error message.
pub async fn try_rows(client: &Client, sql: &str) -> Result<Vec<Vec<String>>, String> {
    let messages = client.simple_query(sql).await.map_err(|e| {
        e.as_db_error()
            .map(|d| d.message().to_string())
            .unwrap_or_else(|| e.to_string())
    })?;
    Ok(messages
        .into_iter()
        .filter_map(|m| match m {
            SimpleQueryMessage::Row(r) => Some(
                (0..r.len())
                    .map(|i| r.get(i).unwrap_or("NULL").to_string())
                    .collect(),
            ),
            _ => None,
        })
        .collect())
}

/// [`rows`], sorted (an order-independent answer to compare).
pub async fn sorted(client: &Client, sql: &str) -> Vec<Vec<String>> {
    let mut r = rows(client, sql).await;
    r.sort();
    r
}

/// The single value of a one-row, one-column result.
pub async fn value(client: &Client, sql: &str) -> String {
    let r = rows(client, sql).await;
    assert_eq!(r.len(), 1, "{sql}: expected one row, got {r:?}");
    r[0][0].clone()
}

/// The SQLSTATE of the error `sql` fails with (panics if it succeeds).
pub async fn error_code(client: &Client, sql: &str) -> String {
    match client.simple_query(sql).await {
        Ok(_) => panic!("{sql}: expected an error"),
        Err(e) => e
            .code()
            .map(|c| c.code().to_string())
            .unwrap_or_else(|| panic!("{sql}: error without SQLSTATE: {e}")),
    }
}

/// Polls `sql` until `pred` holds for its rows, or panics after `secs` seconds.
pub async fn wait_until(
    client: &Client,
    sql: &str,
    secs: u64,
    pred: impl Fn(&[Vec<String>]) -> bool,
) -> Vec<Vec<String>> {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(secs);
    loop {
        let r = rows(client, sql).await;
        if pred(&r) {
            return r;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{sql}: condition not reached in {secs}s; last result {r:?}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
}
