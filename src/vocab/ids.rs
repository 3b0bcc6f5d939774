//! Typed ids: an index into one kind of table, so a prefill index can never be used where a
//! decode index is meant. [`IdVec`] is a `Vec` indexed by one id type.

use std::marker::PhantomData;
use std::ops::{Index, IndexMut};

macro_rules! id {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
        pub struct $name(pub u32);

        impl $name {
            /// The index as a `usize`.
            pub fn idx(self) -> usize {
                self.0 as usize
            }
        }

        impl From<usize> for $name {
            fn from(i: usize) -> Self {
                Self(u32::try_from(i).expect("an id fits in u32"))
            }
        }
    };
}

id!(
    /// A prefill instance: its position among all prefill instances (pools in file order).
    PrefillId
);
id!(
    /// A decode instance: its position among all decode instances (pools in file order).
    DecodeId
);
id!(
    /// A colocated (plain sglang) instance: its position among all colocated instances.
    ColocatedId
);
id!(
    /// An instance of either role as the results number it: prefill instances first, then
    /// decode instances (the scenario orders pools by role).
    InstanceId
);
id!(
    /// A pool: its index in the scenario's `pools`.
    PoolId
);
id!(
    /// A transfer-queue lane of a prefill instance: queue `q` of prefill rank `r` is lane
    /// `r · sglang.queue_size + q`.
    ShardId
);

/// A `Vec<T>` indexed by the id type `I`.
#[derive(Clone, Debug)]
pub struct IdVec<I, T> {
    items: Vec<T>,
    _id: PhantomData<fn(I)>,
}

impl<I, T> Default for IdVec<I, T> {
    fn default() -> Self {
        Self {
            items: Vec::new(),
            _id: PhantomData,
        }
    }
}

impl<I: From<usize> + Copy, T> IdVec<I, T> {
    /// Appends `item` and returns its id.
    pub fn push(&mut self, item: T) -> I {
        self.items.push(item);
        I::from(self.items.len() - 1)
    }

    /// Every id, ascending.
    pub fn ids(&self) -> impl Iterator<Item = I> + use<I, T> {
        (0..self.items.len()).map(I::from)
    }

    /// `(id, item)` pairs, ascending.
    pub fn iter_enumerated(&self) -> impl Iterator<Item = (I, &T)> {
        self.items.iter().enumerate().map(|(i, t)| (I::from(i), t))
    }
}

impl<I, T> FromIterator<T> for IdVec<I, T> {
    /// Items in id order.
    fn from_iter<It: IntoIterator<Item = T>>(items: It) -> Self {
        Self {
            items: items.into_iter().collect(),
            _id: PhantomData,
        }
    }
}

impl<I, T> IdVec<I, T> {
    /// Number of items.
    pub fn len(&self) -> usize {
        self.items.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    /// Items in id order.
    pub fn iter(&self) -> std::slice::Iter<'_, T> {
        self.items.iter()
    }

    /// Items in id order, mutable.
    pub fn iter_mut(&mut self) -> std::slice::IterMut<'_, T> {
        self.items.iter_mut()
    }
}

macro_rules! index {
    ($name:ident) => {
        impl<T> Index<$name> for IdVec<$name, T> {
            type Output = T;
            fn index(&self, i: $name) -> &T {
                &self.items[i.idx()]
            }
        }
        impl<T> IndexMut<$name> for IdVec<$name, T> {
            fn index_mut(&mut self, i: $name) -> &mut T {
                &mut self.items[i.idx()]
            }
        }
    };
}
index!(PrefillId);
index!(DecodeId);
index!(ColocatedId);
index!(InstanceId);
index!(PoolId);
index!(ShardId);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn idvec_indexes_by_its_own_id() {
        let mut v: IdVec<DecodeId, &str> = IdVec::default();
        let a = v.push("a");
        let b = v.push("b");
        assert_eq!((a, b), (DecodeId(0), DecodeId(1)));
        v[b] = "B";
        assert_eq!(v[DecodeId(1)], "B");
        assert_eq!(v.ids().collect::<Vec<_>>(), [a, b]);
        assert_eq!(v.len(), 2);
    }
}
