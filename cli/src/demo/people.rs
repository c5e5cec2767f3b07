//! The demo's people: departments, titles, managers (by employee id, as an identity provider's
//! enterprise extension names them), start dates and groups, the same on every run.

use std::collections::BTreeSet;

use chrono::{NaiveDate, Utc};
use flow_app::Acting;
use flow_common::db::users::{Profile, ProfileEmail};
use flow_domain::Email;
use flow_domain::ids::UserId;
use futures::StreamExt as _;

use super::demo_email;

/// Departments, each with its head's title, its team leads' title and its members' titles.
const DEPARTMENTS: [(&str, &str, &str, &[&str]); 8] = [
    (
        "Engineering",
        "VP of Engineering",
        "Engineering Manager",
        &[
            "Software Engineer",
            "Senior Software Engineer",
            "Staff Engineer",
            "Site Reliability Engineer",
            "QA Engineer",
            "Engineering Intern",
        ],
    ),
    (
        "Sales",
        "VP of Sales",
        "Sales Manager",
        &[
            "Account Executive",
            "Senior Account Executive",
            "Sales Development Representative",
            "Sales Engineer",
        ],
    ),
    (
        "Customer Success",
        "Head of Customer Success",
        "Customer Success Lead",
        &[
            "Customer Success Manager",
            "Support Specialist",
            "Onboarding Specialist",
        ],
    ),
    (
        "Marketing",
        "Head of Marketing",
        "Marketing Lead",
        &[
            "Product Marketing Manager",
            "Content Writer",
            "Designer",
            "Marketing Intern",
        ],
    ),
    (
        "Operations",
        "Head of Operations",
        "Operations Lead",
        &["Operations Analyst", "Office Manager", "IT Administrator"],
    ),
    (
        "Finance",
        "CFO",
        "Finance Lead",
        &["Accountant", "Financial Analyst", "Payroll Specialist"],
    ),
    (
        "People",
        "Head of People",
        "People Partner Lead",
        &["People Partner", "Recruiter", "Talent Coordinator"],
    ),
    (
        "Legal",
        "General Counsel",
        "Legal Lead",
        &["Counsel", "Paralegal", "Privacy Officer"],
    ),
];

/// Twenty slots of departments (indexes into [`DEPARTMENTS`]): people are spread over them in
/// turn, so Engineering has six in twenty, Sales four, Customer Success three, and so on.
const DEPARTMENT_SLOTS: [usize; 20] = [0, 1, 0, 2, 1, 0, 3, 2, 0, 1, 4, 0, 2, 5, 1, 0, 3, 6, 4, 7];

/// People per team lead in a department.
const TEAM_SIZE: usize = 8;

const GIVEN_NAMES: [&str; 40] = [
    "Ada", "Ben", "Chloe", "Daniel", "Elena", "Farid", "Grace", "Hugo", "Ines", "Jonas", "Kara",
    "Liam", "Maya", "Noah", "Olivia", "Pablo", "Quinn", "Rosa", "Samir", "Tara", "Umar", "Vera",
    "Wen", "Xavier", "Yara", "Zoe", "Aiko", "Bruno", "Carmen", "Dmitri", "Eva", "Femi", "Greta",
    "Hamid", "Isla", "Jamal", "Katya", "Lucas", "Mei", "Nadia",
];

const FAMILY_NAMES: [&str; 40] = [
    "Smith",
    "Garcia",
    "Müller",
    "Rossi",
    "Kowalski",
    "Nguyen",
    "Okafor",
    "Silva",
    "Tanaka",
    "Johansson",
    "Dubois",
    "Novak",
    "Khan",
    "Murphy",
    "Costa",
    "Schmidt",
    "Haddad",
    "Larsen",
    "Moreau",
    "Petrov",
    "Yilmaz",
    "Andersen",
    "Fischer",
    "Ivanova",
    "Mensah",
    "Chen",
    "Patel",
    "Rahman",
    "Santos",
    "Weber",
    "Bianchi",
    "Kim",
    "Lopez",
    "Nakamura",
    "Olsen",
    "Popescu",
    "Reyes",
    "Sato",
    "Varga",
    "Zhang",
];

/// A number in `0..u64::MAX` from `index` and `salt`, the same on every run (splitmix64): the
/// demo looks random and is the same organization every time.
pub(super) fn mix(index: usize, salt: u64) -> u64 {
    let mut z = (index as u64)
        .wrapping_mul(0x9E37_79B9_7F4A_7C15)
        .wrapping_add(salt.wrapping_mul(0xBF58_476D_1CE4_E5B9));
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// `mix` in `0..bound`.
pub(super) fn pick(index: usize, salt: u64, bound: usize) -> usize {
    (mix(index, salt) % bound as u64) as usize
}

/// Where a person sits in the organization.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Rank {
    /// User 1: the chief executive.
    Chief,
    /// The first person of a department.
    Head,
    /// A team lead, reporting to the head.
    Lead,
    /// A member, reporting to their team lead.
    Member,
}

/// Demo person `index` (1-based) of `total`: their department (an index into [`DEPARTMENTS`],
/// none for the chief), rank, and manager's index.
#[derive(Debug, Clone, Copy)]
pub(super) struct Seat {
    department: Option<usize>,
    rank: Rank,
    manager: Option<usize>,
}

/// The seats of people `1..=total`, in order (index 0 is unused).
pub(super) fn seats(total: usize) -> Vec<Seat> {
    let mut seats = vec![
        Seat {
            department: None,
            rank: Rank::Chief,
            manager: None,
        };
        total + 1
    ];
    // The people of each department so far, in order.
    let mut members: Vec<Vec<usize>> = vec![Vec::new(); DEPARTMENTS.len()];
    for (index, seat) in seats.iter_mut().enumerate().skip(2) {
        let department = DEPARTMENT_SLOTS[(index - 2) % DEPARTMENT_SLOTS.len()];
        let people = &mut members[department];
        let position = people.len();
        people.push(index);
        *seat = match position {
            0 => Seat {
                department: Some(department),
                rank: Rank::Head,
                manager: Some(1),
            },
            _ => {
                let lead = people[(position - 1) / TEAM_SIZE * TEAM_SIZE + 1];
                if lead == index {
                    Seat {
                        department: Some(department),
                        rank: Rank::Lead,
                        manager: Some(people[0]),
                    }
                } else {
                    Seat {
                        department: Some(department),
                        rank: Rank::Member,
                        manager: Some(lead),
                    }
                }
            }
        };
    }
    seats
}

/// Whether the person's department handles personal data: theirs is the Data Privacy flow.
pub(super) fn handles_personal_data(seat: &Seat) -> bool {
    seat.department.is_some_and(|department| {
        matches!(
            DEPARTMENTS[department].0,
            "Sales" | "Customer Success" | "Finance" | "People" | "Legal"
        )
    })
}

/// Person `index`'s given and family names.
fn names(index: usize) -> (&'static str, &'static str) {
    (
        GIVEN_NAMES[pick(index, 11, GIVEN_NAMES.len())],
        FAMILY_NAMES[pick(index, 12, FAMILY_NAMES.len())],
    )
}

/// Days since person `index` started: one in sixteen started within the last six weeks (the
/// new hires), the others months or years ago.
pub(super) fn days_employed(index: usize) -> u64 {
    if index > 1 && index.is_multiple_of(16) {
        1 + mix(index, 13) % 42
    } else {
        120 + mix(index, 14) % 2_500
    }
}

/// The employee id of person `index` (their `externalId`, which their reports' `manager_id`
/// names, as an identity provider's enterprise extension does).
fn employee_id(index: usize) -> String {
    format!("E{index:05}")
}

/// The profile of demo person `index`, as an identity provider would send it.
fn profile(index: usize, seat: Seat, today: NaiveDate) -> anyhow::Result<Profile> {
    let email = demo_email(index);
    let (given, family) = names(index);
    let name = format!("{given} {family}");
    let (department, title) = match (seat.department, seat.rank) {
        (None, _) | (_, Rank::Chief) => ("Executive", "Chief Executive Officer"),
        (Some(department), rank) => {
            let (department_name, head, lead, titles) = DEPARTMENTS[department];
            let title = match rank {
                Rank::Head => head,
                Rank::Lead => lead,
                _ => titles[pick(index, 15, titles.len())],
            };
            (department_name, title)
        }
    };
    let manager = seat.manager.map(|manager| {
        let (given, family) = names(manager);
        (employee_id(manager), format!("{given} {family}"))
    });
    Ok(Profile {
        email: Email::parse("email", &email).map_err(|error| anyhow::anyhow!(error))?,
        name: Some(name.clone()),
        active: true,
        external_id: Some(employee_id(index)),
        given_name: Some(given.to_owned()),
        family_name: Some(family.to_owned()),
        formatted_name: Some(name),
        title: Some(title.to_owned()),
        department: Some(department.to_owned()),
        employee_number: Some(employee_id(index)),
        manager_id: manager.as_ref().map(|(id, _)| id.clone()),
        manager_name: manager.map(|(_, name)| name),
        start_date: today.checked_sub_days(chrono::Days::new(days_employed(index))),
        emails: vec![ProfileEmail {
            value: email,
            kind: Some("work".to_owned()),
            primary: true,
        }],
        scim_user_name: None,
    })
}

/// The region group of person `index`.
fn region(index: usize) -> &'static str {
    match index % 5 {
        0 | 1 => "Americas",
        2 | 3 => "EMEA",
        _ => "APAC",
    }
}

/// Provisions people `1..=users` with their profiles, as an identity provider does (a few at a
/// time), then their groups (regions, people managers, new hires).
pub(super) async fn provision(
    context: &flow_app::Context,
    acting: Acting<'_>,
    users: usize,
) -> anyhow::Result<()> {
    let today = Utc::now().date_naive();
    let seats = seats(users);
    let profiles: Vec<(usize, Profile)> = (1..=users)
        .map(|index| Ok((index, profile(index, seats[index], today)?)))
        .collect::<anyhow::Result<_>>()?;
    // The futures are made first and then run a few at a time: a closure making them inside
    // the stream would make this future not `Send` for every lifetime (rust-lang/rust#102211).
    let provisioning: Vec<_> = profiles
        .into_iter()
        .map(|(index, profile)| provision_one(context, acting, index, profile))
        .collect();
    let provisioned: Vec<(usize, UserId)> = futures::stream::iter(provisioning)
        .buffer_unordered(4)
        .collect::<Vec<_>>()
        .await
        .into_iter()
        .collect::<anyhow::Result<_>>()?;
    let mut ids = vec![None; users + 1];
    for (index, id) in provisioned {
        ids[index] = Some(id);
    }
    let members = |wanted: &dyn Fn(usize) -> bool| -> BTreeSet<UserId> {
        (1..=users)
            .filter(|&index| wanted(index))
            .filter_map(|index| ids[index])
            .collect()
    };
    let groups: [(&str, BTreeSet<UserId>); 5] = [
        ("Americas", members(&|index| region(index) == "Americas")),
        ("EMEA", members(&|index| region(index) == "EMEA")),
        ("APAC", members(&|index| region(index) == "APAC")),
        (
            "People managers",
            members(&|index| seats[index].rank != Rank::Member),
        ),
        ("New hires", members(&|index| days_employed(index) <= 42)),
    ];
    for (display_name, members) in groups {
        flow_app::groups::create(
            context,
            acting,
            flow_app::groups::GroupInput {
                display_name: display_name.to_owned(),
                external_id: None,
                members,
            },
        )
        .await?;
    }
    Ok(())
}

/// Provisions person `index` with `profile`; answers their index and id.
async fn provision_one(
    context: &flow_app::Context,
    acting: Acting<'_>,
    index: usize,
    profile: Profile,
) -> anyhow::Result<(usize, UserId)> {
    let changed = flow_app::users::provision(context, acting, profile).await?;
    Ok((index, changed.value.id))
}
