//! Who acted: a person is their id (a Discord user, the console's operator), and the name kept
//! beside it is for display only, as it read when they acted.
//!
//! Everything that counts people (a quorum, a decision's compare-and-swap, a rule's author, the
//! audit trail) compares ids, so a rename between two clicks changes nothing but what a card
//! shows. Records stored before ids were kept hold a bare name: it reads back as
//! [`PersonId::NameOnly`], shown marked as a name, and such a person is the same as another only
//! when the names match, which is all that can be known of them.

use std::fmt;

use serde::de::Error as _;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// What identifies a person, whatever they are called.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum PersonId {
    /// A Discord user, by their user id.
    Discord(u64),
    /// Whoever types at the console: one terminal has one operator.
    Console,
    /// A caller of the Agent Protocol API, by the name of its token in `[api]`: every request
    /// made with one token is the same person, whatever client sent it.
    Api(String),
    /// Stored before people were kept by id: only their name at the time is known.
    NameOnly(String),
}

const DISCORD_PREFIX: &str = "discord:";
const CONSOLE: &str = "console";
const API_PREFIX: &str = "api:";
const NAME_PREFIX: &str = "name:";

impl PersonId {
    /// The stored form: `discord:123`, `console` or `name:alice`.
    pub fn key(&self) -> String {
        match self {
            PersonId::Discord(id) => format!("{DISCORD_PREFIX}{id}"),
            PersonId::Console => CONSOLE.to_string(),
            PersonId::Api(token) => format!("{API_PREFIX}{token}"),
            PersonId::NameOnly(name) => format!("{NAME_PREFIX}{name}"),
        }
    }

    fn parse(key: &str) -> Option<PersonId> {
        if key == CONSOLE {
            return Some(PersonId::Console);
        }
        if let Some(id) = key.strip_prefix(DISCORD_PREFIX) {
            return id.parse().ok().map(PersonId::Discord);
        }
        if let Some(token) = key.strip_prefix(API_PREFIX) {
            return Some(PersonId::Api(token.to_string()));
        }
        key.strip_prefix(NAME_PREFIX)
            .map(|name| PersonId::NameOnly(name.to_string()))
    }
}

impl Serialize for PersonId {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.key())
    }
}

impl<'de> Deserialize<'de> for PersonId {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let key = String::deserialize(deserializer)?;
        PersonId::parse(&key).ok_or_else(|| D::Error::custom(format!("not a person's id: {key:?}")))
    }
}

/// A person as recorded when they acted: their id, and their name then.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Person {
    pub id: PersonId,
    pub name: String,
}

impl Person {
    pub fn discord(user_id: u64, name: impl Into<String>) -> Person {
        Person {
            id: PersonId::Discord(user_id),
            name: name.into(),
        }
    }

    /// The console's operator, under the name the console knows them by.
    pub fn console(name: impl Into<String>) -> Person {
        Person {
            id: PersonId::Console,
            name: name.into(),
        }
    }

    /// The caller of the Agent Protocol API holding the token named `token`.
    pub fn api(token: impl Into<String>) -> Person {
        let token = token.into();
        Person {
            id: PersonId::Api(token.clone()),
            name: token,
        }
    }

    /// Someone known only by a name (a record from before ids were kept).
    pub fn name_only(name: impl Into<String>) -> Person {
        let name = name.into();
        Person {
            id: PersonId::NameOnly(name.clone()),
            name,
        }
    }

    /// Whether `other` is the same person, whatever either was called.
    pub fn is(&self, other: &Person) -> bool {
        self.id == other.id
    }

    /// The Discord user id, for a Discord user.
    pub fn discord_id(&self) -> Option<u64> {
        match self.id {
            PersonId::Discord(id) => Some(id),
            _ => None,
        }
    }
}

/// How a trail or card names them: `alice (<@123>)` for a Discord user (Discord shows the
/// mention under the user's name of today, so a rename cannot hide who it was), the name for the
/// console's operator, and `alice (name only)` for a record from before ids.
impl fmt::Display for Person {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.id {
            PersonId::Discord(id) => write!(f, "{} (<@{id}>)", self.name),
            PersonId::Console => f.write_str(&self.name),
            PersonId::Api(token) => write!(f, "API token {token}"),
            PersonId::NameOnly(_) => write!(f, "{} (name only)", self.name),
        }
    }
}

/// The stored shape of a person: `{"id": "discord:123", "name": "alice"}`, or a bare name as
/// records held before ids were kept.
#[derive(Deserialize)]
#[serde(untagged)]
enum StoredPerson {
    Recorded { id: PersonId, name: String },
    NameOnly(String),
}

impl<'de> Deserialize<'de> for Person {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        Ok(match StoredPerson::deserialize(deserializer)? {
            StoredPerson::Recorded { id, name } => Person { id, name },
            StoredPerson::NameOnly(name) => Person::name_only(name),
        })
    }
}

/// In tests a person is written as their name: each name stands for one Discord
/// user, whose id is made from the name.
#[cfg(any(test, feature = "test-support"))]
impl From<&str> for Person {
    fn from(name: &str) -> Person {
        let id = name.bytes().fold(7_u64, |id, byte| {
            id.wrapping_mul(31).wrapping_add(u64::from(byte))
        });
        Person::discord(id, name)
    }
}

#[cfg(any(test, feature = "test-support"))]
impl From<&str> for ActedBy {
    fn from(name: &str) -> ActedBy {
        ActedBy::person(Person::from(name))
    }
}

/// People joined for a line: "alice, bob".
pub fn names(people: &[Person]) -> String {
    people
        .iter()
        .map(|person| person.name.as_str())
        .collect::<Vec<_>>()
        .join(", ")
}

/// Who or what made something happen, as the trail and the transcript keep it: one or more
/// people (a quorum's approvers), or what acted for them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ActedBy {
    People(Vec<Person>),
    /// What approved without a click (`Approve ×N (3 left)`, `continuous mode`, a rule).
    Automatic(String),
    /// Text stored before people were kept by id: a name or what acted, as it was written then.
    Recorded(String),
}

impl ActedBy {
    pub fn person(person: Person) -> ActedBy {
        ActedBy::People(vec![person])
    }

    /// The people among them (none for what acted automatically or an old record).
    pub fn people(&self) -> &[Person] {
        match self {
            ActedBy::People(people) => people,
            ActedBy::Automatic(_) | ActedBy::Recorded(_) => &[],
        }
    }

    /// Whether `person` is among them.
    pub fn includes(&self, person: &Person) -> bool {
        self.people().iter().any(|p| p.is(person))
    }

    /// The short form a card or a message shows: the names, or what acted.
    pub fn names(&self) -> String {
        match self {
            ActedBy::People(people) => names(people),
            ActedBy::Automatic(what) | ActedBy::Recorded(what) => what.clone(),
        }
    }
}

impl From<Person> for ActedBy {
    fn from(person: Person) -> ActedBy {
        ActedBy::person(person)
    }
}

impl From<&Person> for ActedBy {
    fn from(person: &Person) -> ActedBy {
        ActedBy::person(person.clone())
    }
}

/// The long form a trail shows: each person with their id (see `Person`'s `Display`).
impl fmt::Display for ActedBy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ActedBy::People(people) => {
                for (i, person) in people.iter().enumerate() {
                    if i > 0 {
                        f.write_str(", ")?;
                    }
                    write!(f, "{person}")?;
                }
                Ok(())
            }
            ActedBy::Automatic(what) => f.write_str(what),
            ActedBy::Recorded(text) => write!(f, "{text} (name only)"),
        }
    }
}

#[derive(Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
enum TaggedActedBy {
    People(Vec<Person>),
    Automatic(String),
}

/// Stored as `{"people": [...]}` or `{"automatic": "..."}`; a bare string is a record from
/// before ids, kept as it was written.
#[derive(Deserialize)]
#[serde(untagged)]
enum StoredActedBy {
    Tagged(TaggedActedBy),
    Recorded(String),
}

impl Serialize for ActedBy {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self {
            ActedBy::People(people) => TaggedActedBy::People(people.clone()).serialize(serializer),
            ActedBy::Automatic(what) => {
                TaggedActedBy::Automatic(what.clone()).serialize(serializer)
            }
            ActedBy::Recorded(text) => serializer.serialize_str(text),
        }
    }
}

impl<'de> Deserialize<'de> for ActedBy {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        Ok(match StoredActedBy::deserialize(deserializer)? {
            StoredActedBy::Tagged(TaggedActedBy::People(people)) => ActedBy::People(people),
            StoredActedBy::Tagged(TaggedActedBy::Automatic(what)) => ActedBy::Automatic(what),
            StoredActedBy::Recorded(text) => ActedBy::Recorded(text),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_person_round_trips_and_a_bare_name_reads_back_marked_as_a_name() {
        let alice = Person::discord(42, "alice");
        let stored = serde_json::to_string(&alice).unwrap();
        assert_eq!(stored, r#"{"id":"discord:42","name":"alice"}"#);
        assert_eq!(serde_json::from_str::<Person>(&stored).unwrap(), alice);

        let old: Person = serde_json::from_str(r#""maria""#).unwrap();
        assert_eq!(old.id, PersonId::NameOnly("maria".into()));
        assert_eq!(old.to_string(), "maria (name only)");

        let console: Person = serde_json::from_str(r#"{"id":"console","name":"op"}"#).unwrap();
        assert_eq!(console, Person::console("op"));
        assert!(serde_json::from_str::<Person>(r#"{"id":"discord:x","name":"a"}"#).is_err());
    }

    #[test]
    fn an_api_token_is_a_person_by_its_name_and_never_a_discord_user() {
        let ci = Person::api("ci");
        let stored = serde_json::to_string(&ci).unwrap();
        assert_eq!(stored, r#"{"id":"api:ci","name":"ci"}"#);
        assert_eq!(serde_json::from_str::<Person>(&stored).unwrap(), ci);
        assert_eq!(ci.to_string(), "API token ci");
        assert!(ci.is(&Person::api("ci")));
        assert!(!ci.is(&Person::api("dashboard")));
        assert!(!ci.is(&Person::name_only("ci")));
        assert_eq!(ci.discord_id(), None);
    }

    #[test]
    fn the_same_id_is_the_same_person_whatever_the_name() {
        let before = Person::discord(42, "alice");
        let renamed = Person::discord(42, "alicia");
        assert!(before.is(&renamed));
        assert!(!before.is(&Person::discord(43, "alice")));
        assert!(!before.is(&Person::name_only("alice")));
        assert_eq!(renamed.to_string(), "alicia (<@42>)");
    }

    #[test]
    fn who_acted_round_trips_and_old_text_reads_back_as_recorded() {
        let quorum = ActedBy::People(vec![Person::discord(1, "alice"), Person::discord(2, "bob")]);
        let stored = serde_json::to_string(&quorum).unwrap();
        assert_eq!(serde_json::from_str::<ActedBy>(&stored).unwrap(), quorum);
        assert_eq!(quorum.names(), "alice, bob");
        assert_eq!(quorum.to_string(), "alice (<@1>), bob (<@2>)");
        assert!(quorum.includes(&Person::discord(2, "robert")));

        let auto = ActedBy::Automatic("continuous mode".into());
        let stored = serde_json::to_string(&auto).unwrap();
        assert_eq!(serde_json::from_str::<ActedBy>(&stored).unwrap(), auto);

        let old: ActedBy = serde_json::from_str(r#""alice, bob""#).unwrap();
        assert_eq!(old, ActedBy::Recorded("alice, bob".into()));
        assert_eq!(old.to_string(), "alice, bob (name only)");
        assert!(old.people().is_empty());
        assert_eq!(serde_json::to_string(&old).unwrap(), r#""alice, bob""#);
    }
}
