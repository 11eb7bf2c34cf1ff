//! Who a Discord interaction or message comes from, as the core knows people: their user id,
//! with their user name of the moment for display only.

use crate::core::person::Person;

/// The person behind `user`: their id decides who they are; the name only labels cards and trails.
pub fn person_of(user: &serenity::all::User) -> Person {
    Person::discord(user.id.get(), user.name.clone())
}
