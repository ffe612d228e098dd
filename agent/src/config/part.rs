//! Parts of the validated configuration that know their own fields: what a reload compares.
//!
//! A reload must say which settings it put in force and which wait for a restart. Kept as a
//! hand-written list of names, that answer drifts from the code (a new field is forgotten, or
//! applied halfway). Here each field of a part is declared with the documented path it comes
//! from (`limits.max_groups`), in the struct itself, through [`config_part!`](crate::config_part):
//! [`Part::changed`] compares two values field by field and names the paths that differ, and
//! [`Part::paths`] lists every path the part holds, so a test can check that every field of
//! the configuration file belongs to exactly one part.
//!
//! A field is declared `=> "path"` (a setting, or a whole section that changes as one, like
//! `detectors`), `=> ["a", "b"]` (one value read from either of two fields, like a secret's
//! `_file` and `_env`), or `=> part` (a nested part, compared field by field).

/// A part of the configuration whose fields carry the paths they are read from.
pub trait Part {
    /// Every documented path this part holds, in declaration order.
    fn paths(out: &mut Vec<&'static str>);

    /// The paths whose values differ between `self` and `other`, in declaration order.
    fn changed(&self, other: &Self, out: &mut Vec<&'static str>);

    /// [`Part::paths`] as a new list.
    fn all_paths() -> Vec<&'static str> {
        let mut out = Vec::new();
        Self::paths(&mut out);
        out
    }

    /// [`Part::changed`] as a new list.
    fn changes(&self, other: &Self) -> Vec<&'static str> {
        let mut out = Vec::new();
        self.changed(other, &mut out);
        out
    }
}

/// What a reload did: the paths it put in force and the paths that changed but wait for a
/// restart. `POST /-/reload` answers with it and the log carries it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReloadReport {
    /// Settings applied, as documented paths.
    pub applied: Vec<&'static str>,
    /// Settings that changed in the file but are read only at start-up: not applied.
    pub restart: Vec<&'static str>,
}

impl ReloadReport {
    /// The applied paths, comma-separated, or `nothing`.
    pub fn applied_list(&self) -> String {
        list(&self.applied)
    }

    /// The restart-only paths, comma-separated, or `nothing`.
    pub fn restart_list(&self) -> String {
        list(&self.restart)
    }
}

impl std::fmt::Display for ReloadReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "configuration reloaded; applied: {}; needs a restart to apply: {}",
            self.applied_list(),
            self.restart_list()
        )
    }
}

fn list(paths: &[&str]) -> String {
    if paths.is_empty() {
        "nothing".to_owned()
    } else {
        paths.join(", ")
    }
}

/// Declares a struct whose fields each carry the documented path they are read from, and
/// implements [`Part`] for it (see the module documentation).
#[macro_export]
macro_rules! config_part {
    (
        $(#[$meta:meta])*
        $vis:vis struct $name:ident {
            $(
                $(#[$fmeta:meta])*
                $fvis:vis $field:ident : $ty:ty => $class:tt
            ),* $(,)?
        }
    ) => {
        $(#[$meta])*
        $vis struct $name {
            $(
                $(#[$fmeta])*
                $fvis $field: $ty,
            )*
        }

        impl $crate::config::part::Part for $name {
            fn paths(out: &mut Vec<&'static str>) {
                $( $crate::config_part!(@paths out, $class, $ty); )*
            }

            fn changed(&self, other: &Self, out: &mut Vec<&'static str>) {
                $( $crate::config_part!(@changed out, $class, $ty, &self.$field, &other.$field); )*
            }
        }
    };
    (@paths $out:ident, part, $ty:ty) => {
        <$ty as $crate::config::part::Part>::paths($out)
    };
    (@paths $out:ident, [$($p:literal),+], $ty:ty) => {
        $( $out.push($p); )+
    };
    (@paths $out:ident, $p:literal, $ty:ty) => {
        $out.push($p)
    };
    (@changed $out:ident, part, $ty:ty, $a:expr, $b:expr) => {
        <$ty as $crate::config::part::Part>::changed($a, $b, $out)
    };
    (@changed $out:ident, [$($p:literal),+], $ty:ty, $a:expr, $b:expr) => {
        if $a != $b {
            $( $out.push($p); )+
        }
    };
    (@changed $out:ident, $p:literal, $ty:ty, $a:expr, $b:expr) => {
        if $a != $b {
            $out.push($p);
        }
    };
}

#[cfg(test)]
mod tests {
    use super::Part;

    crate::config_part! {
        /// A nested part.
        #[derive(Debug, Clone, PartialEq, Default)]
        struct Inner {
            a: u32 => "s.a",
            b: String => "s.b",
        }
    }

    crate::config_part! {
        /// An outer part.
        #[derive(Debug, Clone, PartialEq, Default)]
        struct Outer {
            inner: Inner => part,
            token: Option<String> => ["auth.token_file", "auth.token_env"],
            whole: Vec<u8> => "section",
        }
    }

    #[test]
    fn paths_are_listed_in_declaration_order_with_nested_parts_inline() {
        assert_eq!(
            Outer::all_paths(),
            ["s.a", "s.b", "auth.token_file", "auth.token_env", "section"]
        );
    }

    #[test]
    fn only_the_fields_that_differ_are_named() {
        let a = Outer::default();
        assert!(a.changes(&a.clone()).is_empty());
        let mut b = a.clone();
        b.inner.b = "x".into();
        b.whole.push(1);
        assert_eq!(a.changes(&b), ["s.b", "section"]);
        let mut c = a.clone();
        c.token = Some("t".into());
        assert_eq!(a.changes(&c), ["auth.token_file", "auth.token_env"]);
    }
}
