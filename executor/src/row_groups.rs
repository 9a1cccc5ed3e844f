//! A chunk's rows grouped by key: the per-key work of a keyed operator (the epoch's
//! "before" image, the state lookup, several hashes each) then runs once per distinct
//! key of the chunk instead of once per row.

use ahash::AHashMap as HashMap;

/// Row indexes grouped by key, each group's rows in their chunk order.
pub struct RowGroups {
    /// The first row of each group, in order of first appearance.
    pub first_row: Vec<usize>,
    /// Group `g`'s rows are `order[start[g]..start[g + 1]]`.
    start: Vec<usize>,
    order: Vec<usize>,
}

impl RowGroups {
    /// Groups rows `0..n` by `key_of(row)` (one hash per row).
    pub fn new<'a>(n: usize, key_of: impl Fn(usize) -> &'a [u8]) -> Self {
        let mut group_of: HashMap<&[u8], u32> = HashMap::with_capacity(n.min(1024));
        let mut first_row: Vec<usize> = Vec::new();
        let mut row_group: Vec<u32> = Vec::with_capacity(n);
        for i in 0..n {
            let next = first_row.len() as u32;
            let g = *group_of.entry(key_of(i)).or_insert_with(|| {
                first_row.push(i);
                next
            });
            row_group.push(g);
        }
        // A counting sort keeps each group's rows in order.
        let mut start = vec![0usize; first_row.len() + 1];
        for g in &row_group {
            start[*g as usize + 1] += 1;
        }
        for g in 0..first_row.len() {
            start[g + 1] += start[g];
        }
        let mut fill = start.clone();
        let mut order = vec![0usize; n];
        for (i, g) in row_group.iter().enumerate() {
            order[fill[*g as usize]] = i;
            fill[*g as usize] += 1;
        }
        Self {
            first_row,
            start,
            order,
        }
    }

    /// The rows of group `g`, in chunk order.
    pub fn rows(&self, g: usize) -> &[usize] {
        &self.order[self.start[g]..self.start[g + 1]]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn groups_keep_first_appearance_and_row_order() {
        let keys: [&[u8]; 6] = [b"b", b"a", b"b", b"c", b"a", b"b"];
        let g = RowGroups::new(keys.len(), |i| keys[i]);
        assert_eq!(g.first_row, vec![0, 1, 3]);
        assert_eq!(g.rows(0), &[0, 2, 5]);
        assert_eq!(g.rows(1), &[1, 4]);
        assert_eq!(g.rows(2), &[3]);
    }
}
