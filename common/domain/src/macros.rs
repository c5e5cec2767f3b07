//! The declaration of the string enums of the domain (statuses, priorities, event types,
//! recurrences, report periods and formats, roles, tiers, audit actions).

/// Declares a string enum with its wire names, parsing that names the allowed values on error.
/// [`ALL`](#associatedconstant.ALL) lists every value, so every list shown to people (OpenAPI
/// text, templates, error messages) is derived from the enum. With the `sqlx` feature the enum is
/// also a Postgres `text` value that decodes loudly: a stored name this build does not know is a
/// decoding error naming it, never a default.
macro_rules! string_enum {
    ($(#[$doc:meta])* $name:ident { $($(#[$vdoc:meta])* $variant:ident => $text:literal),+ $(,)? }) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, ::serde::Serialize, ::serde::Deserialize, ::utoipa::ToSchema)]
        pub enum $name {
            $($(#[$vdoc])* #[serde(rename = $text)] #[schema(rename = $text)] $variant),+
        }

        impl $name {
            /// Every value, in declaration order.
            pub const ALL: &'static [$name] = &[$($name::$variant),+];

            /// The wire name.
            pub fn as_str(self) -> &'static str {
                match self { $($name::$variant => $text),+ }
            }

            /// The allowed values joined for an error message: `low, medium, high`.
            pub fn allowed() -> String {
                [$($text),+].join(", ")
            }

            /// Parses field `field`, naming the allowed values on error.
            pub fn parse_field(field: &str, text: &str) -> Result<Self, $crate::Invalid> {
                text.parse().map_err(|_| {
                    $crate::Invalid(format!("{field} must be one of: {}", Self::allowed()))
                })
            }
        }

        impl ::std::str::FromStr for $name {
            type Err = $crate::Invalid;
            fn from_str(text: &str) -> Result<Self, $crate::Invalid> {
                match text {
                    $($text => Ok($name::$variant),)+
                    _ => Err($crate::Invalid(format!("must be one of: {}", Self::allowed()))),
                }
            }
        }

        impl ::std::convert::AsRef<str> for $name {
            fn as_ref(&self) -> &str {
                self.as_str()
            }
        }

        impl ::std::fmt::Display for $name {
            fn fmt(&self, f: &mut ::std::fmt::Formatter<'_>) -> ::std::fmt::Result {
                f.write_str(self.as_str())
            }
        }

        #[cfg(feature = "sqlx")]
        impl ::sqlx::Type<::sqlx::Postgres> for $name {
            fn type_info() -> ::sqlx::postgres::PgTypeInfo {
                <str as ::sqlx::Type<::sqlx::Postgres>>::type_info()
            }

            fn compatible(ty: &::sqlx::postgres::PgTypeInfo) -> bool {
                <str as ::sqlx::Type<::sqlx::Postgres>>::compatible(ty)
            }
        }

        #[cfg(feature = "sqlx")]
        impl ::sqlx::postgres::PgHasArrayType for $name {
            fn array_type_info() -> ::sqlx::postgres::PgTypeInfo {
                <&str as ::sqlx::postgres::PgHasArrayType>::array_type_info()
            }

            fn array_compatible(ty: &::sqlx::postgres::PgTypeInfo) -> bool {
                <&str as ::sqlx::postgres::PgHasArrayType>::array_compatible(ty)
            }
        }

        #[cfg(feature = "sqlx")]
        impl<'r> ::sqlx::Decode<'r, ::sqlx::Postgres> for $name {
            fn decode(
                value: ::sqlx::postgres::PgValueRef<'r>,
            ) -> Result<Self, ::sqlx::error::BoxDynError> {
                let text = <&str as ::sqlx::Decode<'r, ::sqlx::Postgres>>::decode(value)?;
                $crate::macros::decode_name(stringify!($name), text, Self::allowed)
            }
        }

        #[cfg(feature = "sqlx")]
        impl<'q> ::sqlx::Encode<'q, ::sqlx::Postgres> for $name {
            fn encode_by_ref(
                &self,
                buffer: &mut ::sqlx::postgres::PgArgumentBuffer,
            ) -> Result<::sqlx::encode::IsNull, ::sqlx::error::BoxDynError> {
                <&str as ::sqlx::Encode<'q, ::sqlx::Postgres>>::encode(self.as_str(), buffer)
            }
        }
    };
}

/// Parses a name read from the database, or says which enum met an unknown name (a row written
/// by a newer build, or by hand) and which names it knows.
#[cfg(feature = "sqlx")]
pub(crate) fn decode_name<T: std::str::FromStr>(
    kind: &str,
    text: &str,
    allowed: fn() -> String,
) -> Result<T, sqlx::error::BoxDynError> {
    text.parse().map_err(|_| {
        format!(
            "unknown {kind} {text:?} in the database (this build knows {})",
            allowed()
        )
        .into()
    })
}

#[cfg(test)]
mod tests {
    use crate::audit::AuditAction;
    use crate::events::EventType;
    use crate::recurrence::Recurrence;
    use crate::report::{AggregateMetric, ExportFormat, ExportStatus, Period};
    use crate::webhook::DeliveryStatus;
    use crate::{AssignmentStatus, ModuleStatus, Priority, Role, Tier};

    /// One test per enum: every value reads back from its own name, the names are distinct,
    /// `allowed` lists them all in order, and a name it does not know is refused naming them.
    macro_rules! round_trip {
        ($($test:ident: $enum:ty),+ $(,)?) => {$(
            #[test]
            fn $test() {
                let names: Vec<&str> = <$enum>::ALL.iter().map(|value| value.as_str()).collect();
                for value in <$enum>::ALL {
                    assert_eq!(value.as_str().parse::<$enum>(), Ok(*value));
                    assert_eq!(value.to_string(), value.as_str());
                    let json = serde_json::to_value(value).unwrap();
                    assert_eq!(json, serde_json::json!(value.as_str()));
                    assert_eq!(serde_json::from_value::<$enum>(json).unwrap(), *value);
                }
                let mut distinct = names.clone();
                distinct.sort_unstable();
                distinct.dedup();
                assert_eq!(distinct.len(), names.len(), "{names:?}");
                assert_eq!(<$enum>::allowed(), names.join(", "));
                let refused = <$enum>::parse_field("field", "no-such-name").unwrap_err();
                assert_eq!(refused.0, format!("field must be one of: {}", names.join(", ")));
            }
        )+};
    }

    round_trip!(
        priorities_round_trip: Priority,
        assignment_statuses_round_trip: AssignmentStatus,
        module_statuses_round_trip: ModuleStatus,
        roles_round_trip: Role,
        tiers_round_trip: Tier,
        event_types_round_trip: EventType,
        recurrences_round_trip: Recurrence,
        periods_round_trip: Period,
        aggregate_metrics_round_trip: AggregateMetric,
        export_formats_round_trip: ExportFormat,
        export_statuses_round_trip: ExportStatus,
        delivery_statuses_round_trip: DeliveryStatus,
        audit_actions_round_trip: AuditAction,
    );
}
