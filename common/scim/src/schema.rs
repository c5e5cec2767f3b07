//! The attributes Flow supports, declared once (RFC 7643 §2, §7): the `/Schemas` documents,
//! name resolution in filters and PATCH paths, the filterable set, what projection always
//! returns and what PATCH may not change all read these tables.

use crate::{CORE_GROUP_SCHEMA, CORE_USER_SCHEMA, ENTERPRISE_USER_SCHEMA, FLOW_USER_SCHEMA};

/// An attribute's data type (RFC 7643 §2.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AttributeType {
    /// A Unicode string.
    String,
    /// `true` or `false`.
    Boolean,
    /// An `xsd:dateTime` (RFC 3339) timestamp.
    DateTime,
    /// A URI to a resource.
    Reference,
    /// An attribute made of sub-attributes.
    Complex,
}

impl AttributeType {
    /// The type name used in schema documents.
    pub fn as_str(self) -> &'static str {
        match self {
            AttributeType::String => "string",
            AttributeType::Boolean => "boolean",
            AttributeType::DateTime => "dateTime",
            AttributeType::Reference => "reference",
            AttributeType::Complex => "complex",
        }
    }
}

/// Whether and how clients may change an attribute (RFC 7643 §7).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mutability {
    /// Set by the service provider only.
    ReadOnly,
    /// Clients may change it.
    ReadWrite,
    /// Set once, never changed.
    Immutable,
}

impl Mutability {
    /// The keyword used in schema documents.
    pub fn as_str(self) -> &'static str {
        match self {
            Mutability::ReadOnly => "readOnly",
            Mutability::ReadWrite => "readWrite",
            Mutability::Immutable => "immutable",
        }
    }
}

/// When an attribute is returned (RFC 7643 §7).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Returned {
    /// Always, whatever `attributes` / `excludedAttributes` say.
    Always,
    /// By default, unless excluded or left out of `attributes`.
    Default,
    /// Only when `attributes` names it.
    Request,
}

impl Returned {
    /// The keyword used in schema documents.
    pub fn as_str(self) -> &'static str {
        match self {
            Returned::Always => "always",
            Returned::Default => "default",
            Returned::Request => "request",
        }
    }
}

/// How unique an attribute's value is (RFC 7643 §7).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Uniqueness {
    /// No constraint.
    None,
    /// Unique within the service provider's scope: here, the organization.
    Server,
}

impl Uniqueness {
    /// The keyword used in schema documents.
    pub fn as_str(self) -> &'static str {
        match self {
            Uniqueness::None => "none",
            Uniqueness::Server => "server",
        }
    }
}

/// One attribute definition: its characteristics as RFC 7643 §7 lists them, plus whether Flow
/// accepts it in a `filter`.
#[derive(Debug, Clone, Copy)]
pub struct Attribute {
    /// The canonical spelling (names are matched case-insensitively).
    pub name: &'static str,
    /// The data type.
    pub kind: AttributeType,
    /// Whether it holds a list of values.
    pub multi_valued: bool,
    /// What it means, for the `/Schemas` document.
    pub description: &'static str,
    /// Whether a resource must have it.
    pub required: bool,
    /// Whether string comparisons are case-sensitive.
    pub case_exact: bool,
    /// Who may change it.
    pub mutability: Mutability,
    /// When it is returned.
    pub returned: Returned,
    /// How unique its value is.
    pub uniqueness: Uniqueness,
    /// The suggested values (`type` of an e-mail, …).
    pub canonical_values: &'static [&'static str],
    /// For references: what they point to.
    pub reference_types: &'static [&'static str],
    /// For complex attributes: their sub-attributes.
    pub sub_attributes: &'static [Attribute],
    /// Whether a `filter` may name it (Flow's choice, not part of RFC 7643).
    pub filterable: bool,
}

impl Attribute {
    const fn of(name: &'static str, kind: AttributeType, description: &'static str) -> Self {
        Self {
            name,
            kind,
            multi_valued: false,
            description,
            required: false,
            case_exact: false,
            mutability: Mutability::ReadWrite,
            returned: Returned::Default,
            uniqueness: Uniqueness::None,
            canonical_values: &[],
            reference_types: &[],
            sub_attributes: &[],
            filterable: false,
        }
    }

    const fn string(name: &'static str, description: &'static str) -> Self {
        Self::of(name, AttributeType::String, description)
    }

    const fn boolean(name: &'static str, description: &'static str) -> Self {
        Self::of(name, AttributeType::Boolean, description)
    }

    const fn date_time(name: &'static str, description: &'static str) -> Self {
        Self::of(name, AttributeType::DateTime, description)
    }

    const fn reference(
        name: &'static str,
        reference_types: &'static [&'static str],
        description: &'static str,
    ) -> Self {
        let mut attribute = Self::of(name, AttributeType::Reference, description);
        attribute.reference_types = reference_types;
        attribute
    }

    const fn complex(
        name: &'static str,
        sub_attributes: &'static [Attribute],
        description: &'static str,
    ) -> Self {
        let mut attribute = Self::of(name, AttributeType::Complex, description);
        attribute.sub_attributes = sub_attributes;
        attribute
    }

    const fn multi_valued(mut self) -> Self {
        self.multi_valued = true;
        self
    }

    const fn required(mut self) -> Self {
        self.required = true;
        self
    }

    const fn case_exact(mut self) -> Self {
        self.case_exact = true;
        self
    }

    const fn read_only(mut self) -> Self {
        self.mutability = Mutability::ReadOnly;
        self
    }

    const fn immutable(mut self) -> Self {
        self.mutability = Mutability::Immutable;
        self
    }

    const fn always_returned(mut self) -> Self {
        self.returned = Returned::Always;
        self
    }

    const fn returned_on_request(mut self) -> Self {
        self.returned = Returned::Request;
        self
    }

    const fn unique(mut self) -> Self {
        self.uniqueness = Uniqueness::Server;
        self
    }

    const fn canonical(mut self, values: &'static [&'static str]) -> Self {
        self.canonical_values = values;
        self
    }

    const fn filterable(mut self) -> Self {
        self.filterable = true;
        self
    }

    /// The sub-attribute of that name, matched case-insensitively.
    pub fn sub_attribute(&self, name: &str) -> Option<&'static Attribute> {
        find(self.sub_attributes, name)
    }

    /// Whether it is a complex attribute.
    pub fn is_complex(&self) -> bool {
        self.kind == AttributeType::Complex
    }
}

fn find(attributes: &'static [Attribute], name: &str) -> Option<&'static Attribute> {
    attributes
        .iter()
        .find(|attribute| attribute.name.eq_ignore_ascii_case(name))
}

/// A schema: its URN, name and the attributes Flow supports of it.
#[derive(Debug, Clone, Copy)]
pub struct Schema {
    /// The schema URN, e.g. `urn:ietf:params:scim:schemas:core:2.0:User`.
    pub id: &'static str,
    /// Its short name.
    pub name: &'static str,
    /// What it describes.
    pub description: &'static str,
    /// The supported attributes.
    pub attributes: &'static [Attribute],
}

/// Schemas are the same when their URNs are.
impl PartialEq for Schema {
    fn eq(&self, other: &Self) -> bool {
        self.id == other.id
    }
}

impl Eq for Schema {}

impl Schema {
    /// The attribute of that name, matched case-insensitively.
    pub fn attribute(&self, name: &str) -> Option<&'static Attribute> {
        find(self.attributes, name)
    }
}

const META_SUB_ATTRIBUTES: &[Attribute] = &[
    Attribute::string("resourceType", "The name of the resource's type.")
        .case_exact()
        .read_only(),
    Attribute::date_time(
        "created",
        "When the resource was added to the service provider.",
    )
    .read_only(),
    Attribute::date_time(
        "lastModified",
        "When the resource was last changed; equals created if it never was.",
    )
    .read_only()
    .filterable(),
    Attribute::reference("location", &["uri"], "The URI of the resource.")
        .case_exact()
        .read_only(),
    Attribute::string("version", "The version of the resource, as a weak ETag.")
        .case_exact()
        .read_only(),
];

/// The attributes every resource has (RFC 7643 §3.1), outside any schema document.
pub const COMMON_ATTRIBUTES: &[Attribute] = &[
    Attribute::string(
        "id",
        "The identifier the service provider gave the resource.",
    )
    .case_exact()
    .read_only()
    .always_returned()
    .unique()
    .filterable(),
    Attribute::string(
        "externalId",
        "The identifier the provisioning client gave the resource.",
    )
    .case_exact()
    .filterable(),
    Attribute::complex(
        "meta",
        META_SUB_ATTRIBUTES,
        "The resource's metadata, set by the service provider.",
    )
    .read_only(),
];

const NAME_SUB_ATTRIBUTES: &[Attribute] = &[
    Attribute::string("formatted", "The full name, formatted for display."),
    Attribute::string("familyName", "The family (last) name.").filterable(),
    Attribute::string("givenName", "The given (first) name.").filterable(),
];

const EMAIL_SUB_ATTRIBUTES: &[Attribute] = &[
    Attribute::string("value", "The e-mail address.")
        .required()
        .filterable(),
    Attribute::string("type", "What the address is for.")
        .canonical(&["work", "home", "other"])
        .filterable(),
    Attribute::boolean("primary", "Whether this is the user's primary address."),
];

const USER_ATTRIBUTES: &[Attribute] = &[
    Attribute::string(
        "userName",
        "Unique in the organization. Flow identifies people by e-mail address: userName when it is one, else the primary (else work, else first) of emails.",
    )
    .required()
    .unique()
    .filterable(),
    Attribute::complex("name", NAME_SUB_ATTRIBUTES, "The components of the user's name."),
    Attribute::string("displayName", "The name shown for the user.").filterable(),
    Attribute::string("title", "The user's job title."),
    Attribute::boolean(
        "active",
        "Whether the user is active: an inactive user keeps their history but gets no new training. A new user is active unless this says otherwise; it cannot be removed, only set.",
    )
    // Required: every user is active or not, so it cannot be removed (a PATCH `remove` of it is
    // 400); an omitted `active` defaults to true on POST and keeps its value on PUT.
    .required()
    .filterable(),
    // Required: Flow needs an address for every user, and a client that sends only what
    // /Schemas marks required (the stock checker, scim2-tester) must send one here when its
    // userName is not one. At most ten, each an address.
    Attribute::complex(
        "emails",
        EMAIL_SUB_ATTRIBUTES,
        "The user's e-mail addresses (at most 10); one is required when userName is not an address.",
    )
    .multi_valued()
    .required(),
];

const MANAGER_SUB_ATTRIBUTES: &[Attribute] = &[
    Attribute::string("value", "The id of the manager's User resource.").case_exact(),
    Attribute::reference("$ref", &["User"], "The URI of the manager's User resource.").case_exact(),
    Attribute::string("displayName", "The manager's name."),
];

const ENTERPRISE_ATTRIBUTES: &[Attribute] = &[
    Attribute::string("employeeNumber", "The user's number in their organization."),
    Attribute::string("department", "The user's department."),
    Attribute::complex("manager", MANAGER_SUB_ATTRIBUTES, "The user's manager."),
];

// A string, as clients send it (a date, or a timestamp of which Flow keeps the date). Its
// canonical value is an example, suggested as RFC 7643 §2.3 lets canonical values be (Flow takes
// any date): a client that fills attributes from /Schemas (the stock checker) sends a date
// rather than a random string.
const FLOW_USER_ATTRIBUTES: &[Attribute] = &[Attribute::string(
    "startDate",
    "The user's start (hire) date, YYYY-MM-DD or an RFC 3339 timestamp; enrollment rules count due dates from it.",
)
.canonical(&["2026-01-05"])];

const MEMBER_SUB_ATTRIBUTES: &[Attribute] = &[
    Attribute::string("value", "The id of the member's User resource.")
        .case_exact()
        .immutable()
        .filterable(),
    Attribute::reference("$ref", &["User"], "The URI of the member's User resource.")
        .case_exact()
        .immutable(),
    // Flow's own rendering of the member (their name, else address), not what a client sent:
    // read-only, and returned only when `attributes` names `members.display`, so that an
    // answer never contradicts what the client wrote.
    Attribute::string("display", "The member's name, else e-mail address.")
        .read_only()
        .returned_on_request(),
    Attribute::string("type", "The kind of member; Flow's groups hold users.")
        .canonical(&["User"])
        .immutable(),
];

const GROUP_ATTRIBUTES: &[Attribute] = &[
    Attribute::string("displayName", "The group's name.")
        .required()
        .filterable(),
    Attribute::complex("members", MEMBER_SUB_ATTRIBUTES, "The users in the group.").multi_valued(),
];

/// The core User schema, with the attributes Flow keeps.
pub const USER: Schema = Schema {
    id: CORE_USER_SCHEMA,
    name: "User",
    description: "A person of the organization who can be assigned training",
    attributes: USER_ATTRIBUTES,
};

/// The enterprise User extension, with the attributes Flow keeps.
pub const ENTERPRISE_USER: Schema = Schema {
    id: ENTERPRISE_USER_SCHEMA,
    name: "EnterpriseUser",
    description: "Enterprise attributes of a user",
    attributes: ENTERPRISE_ATTRIBUTES,
};

/// Flow's own User extension: the start date.
pub const FLOW_USER: Schema = Schema {
    id: FLOW_USER_SCHEMA,
    name: "FlowUser",
    description: "What Flow needs beyond the standard schemas",
    attributes: FLOW_USER_ATTRIBUTES,
};

/// The core Group schema.
pub const GROUP: Schema = Schema {
    id: CORE_GROUP_SCHEMA,
    name: "Group",
    description: "A group of users",
    attributes: GROUP_ATTRIBUTES,
};

/// Every schema the `/Schemas` endpoint lists.
pub const ALL: [&Schema; 4] = [&USER, &ENTERPRISE_USER, &FLOW_USER, &GROUP];

/// The resource types Flow serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ResourceType {
    /// `/Users`.
    User,
    /// `/Groups`.
    Group,
}

impl ResourceType {
    /// Both resource types.
    pub const ALL: [ResourceType; 2] = [ResourceType::User, ResourceType::Group];

    /// The name used in `meta.resourceType` and `/ResourceTypes`.
    pub fn name(self) -> &'static str {
        match self {
            ResourceType::User => "User",
            ResourceType::Group => "Group",
        }
    }

    /// The endpoint under the SCIM root, e.g. `/Users`.
    pub fn endpoint(self) -> &'static str {
        match self {
            ResourceType::User => "/Users",
            ResourceType::Group => "/Groups",
        }
    }

    /// The core schema.
    pub fn schema(self) -> &'static Schema {
        match self {
            ResourceType::User => &USER,
            ResourceType::Group => &GROUP,
        }
    }

    /// The extension schemas, none of them required.
    pub fn extensions(self) -> &'static [&'static Schema] {
        match self {
            ResourceType::User => &[&ENTERPRISE_USER, &FLOW_USER],
            ResourceType::Group => &[],
        }
    }

    /// The schema (core or extension) with that URN, matched case-insensitively.
    pub fn schema_by_urn(self, urn: &str) -> Option<&'static Schema> {
        std::iter::once(self.schema())
            .chain(self.extensions().iter().copied())
            .find(|schema| schema.id.eq_ignore_ascii_case(urn))
    }
}

/// Where a resolved attribute lives in a resource's JSON.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Container {
    /// At the top level (core and common attributes).
    Core,
    /// Inside the object keyed by this extension's URN.
    Extension(&'static Schema),
}

/// An attribute path resolved against a resource type's schemas: canonical spellings and the
/// definitions that govern it.
#[derive(Debug, Clone, Copy)]
pub struct Resolved {
    /// Where the attribute lives.
    pub container: Container,
    /// The attribute.
    pub attribute: &'static Attribute,
    /// The sub-attribute, when the path names one.
    pub sub_attribute: Option<&'static Attribute>,
}

impl Resolved {
    /// The attribute that comparisons apply to: the sub-attribute when there is one.
    pub fn leaf(&self) -> &'static Attribute {
        self.sub_attribute.unwrap_or(self.attribute)
    }

    /// The canonical path: `name.givenName`, or URN-qualified for extension attributes.
    pub fn canonical(&self) -> String {
        let mut path = String::new();
        if let Container::Extension(schema) = self.container {
            path.push_str(schema.id);
            path.push(':');
        }
        path.push_str(self.attribute.name);
        if let Some(sub) = self.sub_attribute {
            path.push('.');
            path.push_str(sub.name);
        }
        path
    }
}

/// Why an attribute path does not resolve.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Unresolved {
    /// Not an attribute Flow keeps (it may be a standard one Flow does not support).
    Unknown,
    /// A sub-attribute of a complex attribute Flow keeps, but not one Flow keeps (such as
    /// `name.middleName`); the text says which.
    UnknownSubAttribute(String),
    /// A sub-attribute of an attribute that has none (`userName.value`); the text says which.
    NotComplex(String),
}

/// Names under which providers send a start date, mapped to Flow's `startDate`: Okta and Entra
/// ID administrators map an HR field to a custom attribute, commonly with one of these names,
/// at the top level or (non-standard) inside the enterprise extension.
pub const START_DATE_ALIASES: [&str; 3] = ["startDate", "hireDate", "employeeHireDate"];

/// Resolves `[urn:]name[.sub]` against a resource type: the core schema and common attributes
/// when there is no URN (or the core URN), an extension's attributes under its URN. A start
/// date under one of [`START_DATE_ALIASES`] resolves to Flow's extension attribute.
pub fn resolve(
    resource: ResourceType,
    urn: Option<&str>,
    name: &str,
    sub: Option<&str>,
) -> Result<Resolved, Unresolved> {
    let core = resource.schema();
    let (container, attribute) = match urn {
        None => match core
            .attribute(name)
            .or_else(|| find(COMMON_ATTRIBUTES, name))
        {
            Some(attribute) => (Container::Core, attribute),
            None => start_date_alias(resource, name).ok_or(Unresolved::Unknown)?,
        },
        Some(urn) => {
            let schema = resource.schema_by_urn(urn).ok_or(Unresolved::Unknown)?;
            if schema.id == core.id {
                let attribute = core
                    .attribute(name)
                    .or_else(|| find(COMMON_ATTRIBUTES, name))
                    .ok_or(Unresolved::Unknown)?;
                (Container::Core, attribute)
            } else {
                match schema.attribute(name) {
                    Some(attribute) => (Container::Extension(schema), attribute),
                    None if schema.id == ENTERPRISE_USER_SCHEMA => {
                        start_date_alias(resource, name).ok_or(Unresolved::Unknown)?
                    }
                    None => return Err(Unresolved::Unknown),
                }
            }
        }
    };
    let sub_attribute = match sub {
        None => None,
        Some(sub) if attribute.is_complex() => {
            Some(attribute.sub_attribute(sub).ok_or_else(|| {
                Unresolved::UnknownSubAttribute(format!(
                    "'{}' has no sub-attribute '{sub}' that Flow supports",
                    attribute.name
                ))
            })?)
        }
        Some(sub) => {
            return Err(Unresolved::NotComplex(format!(
                "'{}' has no sub-attributes, so '{}.{sub}' names nothing",
                attribute.name, attribute.name
            )));
        }
    };
    Ok(Resolved {
        container,
        attribute,
        sub_attribute,
    })
}

fn start_date_alias(resource: ResourceType, name: &str) -> Option<(Container, &'static Attribute)> {
    if resource != ResourceType::User
        || !START_DATE_ALIASES
            .iter()
            .any(|alias| alias.eq_ignore_ascii_case(name))
    {
        return None;
    }
    Some((Container::Extension(&FLOW_USER), &FLOW_USER_ATTRIBUTES[0]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_resolve_case_insensitively_to_their_canonical_spelling() {
        let resolved = resolve(ResourceType::User, None, "USERNAME", None).unwrap();
        assert_eq!(resolved.canonical(), "userName");
        let resolved = resolve(ResourceType::User, None, "name", Some("GIVENNAME")).unwrap();
        assert_eq!(resolved.canonical(), "name.givenName");
        let resolved = resolve(
            ResourceType::User,
            Some("urn:ietf:params:scim:schemas:core:2.0:user"),
            "emails",
            Some("value"),
        )
        .unwrap();
        assert_eq!(resolved.canonical(), "emails.value");
        assert_eq!(resolved.container, Container::Core);
    }

    #[test]
    fn extension_attributes_resolve_under_their_urn_only() {
        let resolved = resolve(
            ResourceType::User,
            Some("urn:ietf:params:scim:schemas:extension:enterprise:2.0:User"),
            "Department",
            None,
        )
        .unwrap();
        assert_eq!(
            resolved.canonical(),
            "urn:ietf:params:scim:schemas:extension:enterprise:2.0:User:department"
        );
        assert_eq!(
            resolve(ResourceType::User, None, "department", None).unwrap_err(),
            Unresolved::Unknown
        );
        assert_eq!(
            resolve(
                ResourceType::Group,
                Some("urn:ietf:params:scim:schemas:extension:enterprise:2.0:User"),
                "department",
                None
            )
            .unwrap_err(),
            Unresolved::Unknown
        );
    }

    #[test]
    fn start_date_aliases_resolve_to_the_flow_extension() {
        for (urn, name) in [
            (None, "startDate"),
            (None, "hireDate"),
            (
                Some("urn:ietf:params:scim:schemas:extension:enterprise:2.0:User"),
                "employeeHireDate",
            ),
            (
                Some("urn:ietf:params:scim:schemas:extension:flow:2.0:User"),
                "startdate",
            ),
        ] {
            let resolved = resolve(ResourceType::User, urn, name, None).unwrap();
            assert_eq!(
                resolved.canonical(),
                "urn:ietf:params:scim:schemas:extension:flow:2.0:User:startDate"
            );
        }
        assert!(resolve(ResourceType::Group, None, "startDate", None).is_err());
    }

    #[test]
    fn sub_attributes_must_exist() {
        assert!(matches!(
            resolve(ResourceType::User, None, "userName", Some("value")),
            Err(Unresolved::NotComplex(_))
        ));
        assert!(matches!(
            resolve(ResourceType::User, None, "name", Some("middleName")),
            Err(Unresolved::UnknownSubAttribute(_))
        ));
        assert_eq!(
            resolve(ResourceType::User, None, "nickName", None).unwrap_err(),
            Unresolved::Unknown
        );
    }
}
