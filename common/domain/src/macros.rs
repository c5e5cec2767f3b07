//! The declaration of the string enums of the domain (statuses, priorities, event types,
//! recurrences, report periods and formats).

/// Declares a string enum with its wire names, parsing that names the allowed values on error.
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

        impl ::std::fmt::Display for $name {
            fn fmt(&self, f: &mut ::std::fmt::Formatter<'_>) -> ::std::fmt::Result {
                f.write_str(self.as_str())
            }
        }
    };
}
