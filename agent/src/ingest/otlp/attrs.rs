//! The attribute side of the OTLP mapping: which attribute names a [`super::Mapping`] reads
//! ([`Names`]), the entries of its fields (a plain attribute or a [`Template`] over several),
//! and the attributes found on one span or data point ([`Found`]).
//!
//! Every name the fields, their templates and the outcome rules mention is interned once into
//! a slot, at most [`MAX_WANTED`] of them. A decoder asks [`Names::slot`] for each attribute
//! key it meets: a key nobody maps costs a length lookup and a few byte comparisons, and its
//! value is never decoded. Resource attributes fill a [`Found`] of their own, which each span
//! or point starts from, so an attribute of the span overrides the resource's of the same name.

use std::fmt::Write as _;

use super::AttrValue;

/// Most distinct attribute names one mapping reads: the found set of a span is a bitmask of
/// this width.
pub const MAX_WANTED: usize = 64;

/// Longest attribute name, in bytes.
pub const MAX_NAME_BYTES: usize = 255;

/// The interned attribute names of a mapping, each with its slot.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Names {
    /// Names by their length in bytes (index), each with its slot: a key is compared only with
    /// the wanted names of its own length.
    by_len: Vec<Vec<(Box<[u8]>, u8)>>,
    /// Names by slot.
    names: Vec<String>,
}

/// A problem with the attribute names of one field.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NameError {
    /// More distinct names across the whole mapping than a span's found set holds.
    #[error("the otlp mapping names more than {MAX_WANTED} distinct attributes: list fewer")]
    TooMany,
    /// An empty or over-long name.
    #[error("`{0}`: an attribute name takes 1..={MAX_NAME_BYTES} bytes")]
    Length(String),
    /// A template that does not parse.
    #[error("`{entry}`: {why}")]
    Template {
        /// The entry as written.
        entry: String,
        /// What is wrong with it.
        why: &'static str,
    },
}

impl Names {
    /// The slot of `name`, interning it if new.
    pub fn intern(&mut self, name: &str) -> Result<u8, NameError> {
        if name.is_empty() || name.len() > MAX_NAME_BYTES {
            return Err(NameError::Length(name.to_owned()));
        }
        if let Some(slot) = self.slot(name.as_bytes()) {
            return Ok(slot);
        }
        if self.names.len() >= MAX_WANTED {
            return Err(NameError::TooMany);
        }
        let slot = self.names.len() as u8;
        if self.by_len.len() <= name.len() {
            self.by_len.resize_with(name.len() + 1, Vec::new);
        }
        self.by_len[name.len()].push((name.as_bytes().into(), slot));
        self.names.push(name.to_owned());
        Ok(slot)
    }

    /// The slot of an attribute key, or `None` when the mapping does not read it.
    #[inline]
    pub fn slot(&self, key: &[u8]) -> Option<u8> {
        self.by_len
            .get(key.len())?
            .iter()
            .find(|(n, _)| **n == *key)
            .map(|&(_, slot)| slot)
    }

    /// The name of a slot.
    pub fn name(&self, slot: u8) -> &str {
        &self.names[usize::from(slot)]
    }
}

/// What a template does to an attribute's value before writing it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Filter {
    /// The host of a URL (`http://db-1:8080/x` gives `db-1`).
    Host,
    /// The host and, when the URL gives one, the port (`db-1:8080`).
    HostPort,
}

/// One piece of a template.
#[derive(Debug, Clone, PartialEq)]
pub enum Piece {
    /// Text written as it is.
    Lit(String),
    /// The value of the attribute in a slot, filtered.
    Attr(u8, Option<Filter>),
}

/// A template such as `{server.address}:{server.port}`: text with attribute placeholders. It
/// matches a span only when every attribute it names is present (and every URL filter finds
/// a host).
#[derive(Debug, Clone, PartialEq)]
pub struct Template {
    pieces: Vec<Piece>,
}

/// One entry of a field's list.
#[derive(Debug, Clone, PartialEq)]
pub enum Entry {
    /// A plain attribute: its value as it is.
    Attr(u8),
    /// A template over several attributes.
    Template(Template),
}

/// One field of the mapping (group, shard, key or cache): its entries, tried in order.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Field {
    entries: Vec<Entry>,
}

impl Field {
    /// Parses the entries of one field as written, interning their names. An entry holding a
    /// `{` is a template; any other is an attribute name.
    pub fn parse(names: &mut Names, written: &[String]) -> Result<Field, NameError> {
        let entries = written
            .iter()
            .map(|w| {
                if w.contains(['{', '}']) {
                    Template::parse(names, w).map(Entry::Template)
                } else {
                    names.intern(w).map(Entry::Attr)
                }
            })
            .collect::<Result<_, _>>()?;
        Ok(Field { entries })
    }
}

impl Template {
    /// Parses `{name}` and `{name|host}` / `{name|host_port}` placeholders between literal text.
    fn parse(names: &mut Names, written: &str) -> Result<Template, NameError> {
        let bad = |why| NameError::Template {
            entry: written.to_owned(),
            why,
        };
        let mut pieces = Vec::new();
        let mut rest = written;
        while !rest.is_empty() {
            let open = rest.find('{').unwrap_or(rest.len());
            let lit = &rest[..open];
            if lit.contains('}') {
                return Err(bad("a `}` without its `{`"));
            }
            if !lit.is_empty() {
                pieces.push(Piece::Lit(lit.to_owned()));
            }
            rest = &rest[open..];
            if rest.is_empty() {
                break;
            }
            let close = rest.find('}').ok_or_else(|| bad("a `{` without its `}`"))?;
            let inner = &rest[1..close];
            if inner.contains('{') {
                return Err(bad("placeholders do not nest"));
            }
            let (name, filter) = match inner.split_once('|') {
                None => (inner, None),
                Some((n, "host")) => (n, Some(Filter::Host)),
                Some((n, "host_port")) => (n, Some(Filter::HostPort)),
                Some(_) => return Err(bad("the only filters are `|host` and `|host_port`")),
            };
            pieces.push(Piece::Attr(names.intern(name.trim())?, filter));
            rest = &rest[close + 1..];
        }
        Ok(Template { pieces })
    }
}

/// The attributes of one span or data point (or of one resource) that the mapping reads.
#[derive(Debug, Clone)]
pub struct Found<'a> {
    present: u64,
    values: [AttrValue<'a>; MAX_WANTED],
}

impl Default for Found<'_> {
    fn default() -> Self {
        Found {
            present: 0,
            values: [AttrValue::Other; MAX_WANTED],
        }
    }
}

impl<'a> Found<'a> {
    /// Starts a new span or point from the attributes of its resource.
    #[inline]
    pub fn start_from(&mut self, resource: &Found<'a>) {
        self.present = resource.present;
        let mut bits = resource.present;
        while bits != 0 {
            let i = bits.trailing_zeros() as usize;
            self.values[i] = resource.values[i];
            bits &= bits - 1;
        }
    }

    /// Forgets everything found.
    pub fn clear(&mut self) {
        self.present = 0;
    }

    /// Records the value of the attribute in `slot` (a later value of the same name wins).
    #[inline]
    pub fn set(&mut self, slot: u8, value: AttrValue<'a>) {
        self.present |= 1 << slot;
        self.values[usize::from(slot)] = value;
    }

    /// The value of the attribute in `slot`, if found.
    #[inline]
    pub fn get(&self, slot: u8) -> Option<AttrValue<'a>> {
        (self.present & (1 << slot) != 0).then(|| self.values[usize::from(slot)])
    }
}

/// What a field resolved to on one span.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Hit<'a> {
    /// No entry matched.
    Miss,
    /// A plain attribute's value.
    Plain(AttrValue<'a>),
    /// A template, written into the caller's buffer.
    Rendered,
    /// A template whose attribute has a value that is not a name (a double, bytes, a list).
    WrongType,
}

impl Field {
    /// The first entry of the field that matches `found`. A template is written into `buf`.
    pub fn resolve<'a>(&self, found: &Found<'a>, buf: &mut String) -> Hit<'a> {
        for entry in &self.entries {
            match entry {
                Entry::Attr(slot) => {
                    if let Some(v) = found.get(*slot) {
                        return Hit::Plain(v);
                    }
                }
                Entry::Template(t) => match t.render(found, buf) {
                    Render::Done => return Hit::Rendered,
                    Render::WrongType => return Hit::WrongType,
                    Render::NoMatch => {}
                },
            }
        }
        Hit::Miss
    }
}

/// What rendering a template gave.
enum Render {
    Done,
    NoMatch,
    WrongType,
}

impl Template {
    fn render(&self, found: &Found<'_>, buf: &mut String) -> Render {
        // Every attribute first, so a template that does not match writes nothing.
        let all = self.pieces.iter().all(|p| match p {
            Piece::Lit(_) => true,
            Piece::Attr(slot, _) => found.get(*slot).is_some(),
        });
        if !all {
            return Render::NoMatch;
        }
        buf.clear();
        for piece in &self.pieces {
            let (slot, filter) = match piece {
                Piece::Lit(s) => {
                    buf.push_str(s);
                    continue;
                }
                Piece::Attr(slot, filter) => (*slot, *filter),
            };
            let value = found.get(slot).unwrap_or(AttrValue::Other);
            match (value, filter) {
                (AttrValue::Str(s), None) => buf.push_str(s),
                (AttrValue::Int(i), None) => {
                    let _ = write!(buf, "{i}");
                }
                (AttrValue::Str(url), Some(f)) => match url_host(url, f) {
                    Some(h) => buf.push_str(h),
                    None => return Render::NoMatch,
                },
                _ => return Render::WrongType,
            }
        }
        Render::Done
    }
}

/// The host (or host and port) of an absolute URL (`scheme://[userinfo@]host[:port]/...`),
/// or `None` when it has no host.
pub fn url_host(url: &str, filter: Filter) -> Option<&str> {
    let (_, rest) = url.split_once("://")?;
    let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
    let host_port = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    let host = match filter {
        Filter::HostPort => host_port,
        Filter::Host if host_port.starts_with('[') => {
            // An IPv6 literal keeps its brackets; the port follows the `]`.
            host_port.find(']').map_or(host_port, |i| &host_port[..=i])
        }
        Filter::Host => host_port.split(':').next().unwrap_or(""),
    };
    (!host.is_empty()).then_some(host)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn field(names: &mut Names, entries: &[&str]) -> Field {
        let written: Vec<String> = entries.iter().map(|s| (*s).to_owned()).collect();
        Field::parse(names, &written).unwrap()
    }

    fn found<'a>(names: &Names, attrs: &[(&str, AttrValue<'a>)]) -> Found<'a> {
        let mut f = Found::default();
        for (k, v) in attrs {
            if let Some(slot) = names.slot(k.as_bytes()) {
                f.set(slot, *v);
            }
        }
        f
    }

    fn text(field: &Field, f: &Found<'_>) -> Option<String> {
        let mut buf = String::new();
        match field.resolve(f, &mut buf) {
            Hit::Plain(AttrValue::Str(s)) => Some(s.to_owned()),
            Hit::Plain(AttrValue::Int(i)) => Some(i.to_string()),
            Hit::Rendered => Some(buf),
            Hit::Miss => None,
            other => Some(format!("{other:?}")),
        }
    }

    #[test]
    fn a_template_matches_only_when_every_attribute_is_present() {
        let mut names = Names::default();
        let shard = field(
            &mut names,
            &["{net.peer.name}:{net.peer.port}", "net.peer.name"],
        );
        let f = found(
            &names,
            &[
                ("net.peer.name", AttrValue::Str("127.0.0.1")),
                ("net.peer.port", AttrValue::Int(5433)),
            ],
        );
        assert_eq!(text(&shard, &f).as_deref(), Some("127.0.0.1:5433"));
        let f = found(&names, &[("net.peer.name", AttrValue::Str("db-1"))]);
        assert_eq!(text(&shard, &f).as_deref(), Some("db-1"));
        let f = found(&names, &[("net.peer.port", AttrValue::Int(5433))]);
        assert_eq!(text(&shard, &f), None);
        let f = found(
            &names,
            &[
                ("net.peer.name", AttrValue::Str("db-1")),
                ("net.peer.port", AttrValue::Bool(true)),
            ],
        );
        assert_eq!(text(&shard, &f).as_deref(), Some("WrongType"));
    }

    #[test]
    fn url_filters_take_the_host_or_host_and_port() {
        use Filter::{Host, HostPort};
        let cases = [
            (
                "http://127.0.0.1:8001/a?b",
                HostPort,
                Some("127.0.0.1:8001"),
            ),
            ("http://127.0.0.1:8001/a?b", Host, Some("127.0.0.1")),
            (
                "https://u:p@api.example:443",
                HostPort,
                Some("api.example:443"),
            ),
            ("http://api.example?x=1", HostPort, Some("api.example")),
            ("http://[::1]:9000/x", Host, Some("[::1]")),
            ("http://[::1]:9000/x", HostPort, Some("[::1]:9000")),
            ("/relative/path", HostPort, None),
            ("http:///nohost", Host, None),
        ];
        for (url, f, want) in cases {
            assert_eq!(url_host(url, f), want, "{url} {f:?}");
        }
        let mut names = Names::default();
        let shard = field(&mut names, &["{http.url|host_port}"]);
        let f = found(&names, &[("http.url", AttrValue::Str("/relative"))]);
        assert_eq!(text(&shard, &f), None, "no host: the entry does not match");
    }

    #[test]
    fn bad_templates_and_names_are_refused_with_the_entry() {
        let mut names = Names::default();
        for bad in [
            "{a",
            "a}",
            "{a{b}}",
            "{a|upper}",
            "{}",
            "x{}",
            &format!("{{{}}}", "n".repeat(256)),
        ] {
            let r = Field::parse(&mut names, &[bad.to_owned()]);
            assert!(r.is_err(), "{bad}");
        }
        let many: Vec<String> = (0..=MAX_WANTED).map(|i| format!("a{i}")).collect();
        assert_eq!(
            Field::parse(&mut Names::default(), &many),
            Err(NameError::TooMany)
        );
    }

    #[test]
    fn a_span_attribute_overrides_its_resources() {
        let mut names = Names::default();
        let group = field(&mut names, &["service.name"]);
        let resource = found(&names, &[("service.name", AttrValue::Str("checkout"))]);
        let mut span = Found::default();
        span.start_from(&resource);
        assert_eq!(text(&group, &span).as_deref(), Some("checkout"));
        span.set(names.slot(b"service.name").unwrap(), AttrValue::Str("span"));
        assert_eq!(text(&group, &span).as_deref(), Some("span"));
        span.start_from(&resource);
        assert_eq!(text(&group, &span).as_deref(), Some("checkout"));
    }
}
