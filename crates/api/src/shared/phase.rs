//! Status enums that decode tolerantly: an unknown string (written by a newer operator) is
//! kept verbatim in `Unknown` and is never treated as terminal, so an older operator survives.

/// Declares a string enum with an `Unknown(String)` fallback, serde that round-trips the exact
/// text, and a schema listing only the known values.
macro_rules! tolerant_enum {
    ($(#[$meta:meta])* $vis:vis enum $name:ident { $($(#[$vmeta:meta])* $variant:ident => $text:literal),+ $(,)? }) => {
        $(#[$meta])*
        #[derive(Clone, Debug, PartialEq, Eq, Hash)]
        $vis enum $name {
            $($(#[$vmeta])* $variant,)+
            /// A value this version does not know; kept verbatim, never terminal.
            Unknown(String),
        }

        impl $name {
            /// Every known value, in schema order.
            pub const KNOWN: &'static [&'static str] = &[$($text),+];

            pub fn as_str(&self) -> &str {
                match self {
                    $(Self::$variant => $text,)+
                    Self::Unknown(other) => other.as_str(),
                }
            }

            pub fn parse(text: &str) -> Self {
                $(if text == $text { return Self::$variant; })+
                Self::Unknown(text.to_owned())
            }

            pub fn is_unknown(&self) -> bool {
                matches!(self, Self::Unknown(_))
            }
        }

        impl ::std::fmt::Display for $name {
            fn fmt(&self, f: &mut ::std::fmt::Formatter<'_>) -> ::std::fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl ::serde::Serialize for $name {
            fn serialize<S: ::serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
                serializer.serialize_str(self.as_str())
            }
        }

        impl<'de> ::serde::Deserialize<'de> for $name {
            fn deserialize<D: ::serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
                let text = <String as ::serde::Deserialize>::deserialize(deserializer)?;
                Ok(Self::parse(&text))
            }
        }

        impl ::schemars::JsonSchema for $name {
            fn schema_name() -> ::std::borrow::Cow<'static, str> {
                stringify!($name).into()
            }
            fn inline_schema() -> bool {
                true
            }
            fn json_schema(_: &mut ::schemars::SchemaGenerator) -> ::schemars::Schema {
                ::schemars::json_schema!({"type": "string", "enum": Self::KNOWN})
            }
        }
    };
}

pub(crate) use tolerant_enum;

tolerant_enum! {
    /// `status.origin` of a Snapshot.
    pub enum SnapshotOrigin {
        Scheduled => "scheduled",
        Manual => "manual",
        Discovered => "discovered",
        Adopted => "adopted",
        Replicated => "replicated",
    }
}

tolerant_enum! {
    /// Phase of a manual run requested through the `run-requested` annotation.
    pub enum ManualRunPhase {
        Pending => "Pending",
        Running => "Running",
        Succeeded => "Succeeded",
        Failed => "Failed",
    }
}

impl ManualRunPhase {
    pub fn is_terminal(&self) -> bool {
        match self {
            Self::Succeeded | Self::Failed => true,
            Self::Pending | Self::Running | Self::Unknown(_) => false,
        }
    }
}
