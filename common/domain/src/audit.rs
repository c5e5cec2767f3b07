//! What the audit trail records: the kinds of change to an organization's control plane (keys,
//! webhook endpoints, dashboard accounts, users, groups, enrollment rules), by their stored
//! names.

string_enum!(
    /// The kind of a recorded change (the `action` of an audit row). Stored by its name, so a
    /// name this build does not know fails the read instead of showing as something else.
    AuditAction {
        /// An API key was generated.
        KeyCreated => "key.created",
        /// An API key was revoked.
        KeyRevoked => "key.revoked",
        /// An API key was rolled (replaced, the old one working a while longer).
        KeyRolled => "key.rolled",
        /// A webhook endpoint was created.
        WebhookCreated => "webhook.created",
        /// A webhook endpoint was changed.
        WebhookUpdated => "webhook.updated",
        /// A webhook endpoint's signing secret was rotated.
        WebhookSecretRotated => "webhook.secret_rotated",
        /// A webhook endpoint was deleted.
        WebhookDeleted => "webhook.deleted",
        /// An endpoint's failed deliveries were sent again.
        WebhookRecovered => "webhook.recovered",
        /// A person was invited to the dashboard.
        AccountInvited => "account.invited",
        /// A new sign-in link was issued for an account (resetting it).
        AccountLinkIssued => "account.link_issued",
        /// A person set their password with a sign-in link.
        AccountPasswordSet => "account.password_set",
        /// A dashboard account was removed.
        AccountRemoved => "account.removed",
        /// A dashboard account was disabled.
        AccountDisabled => "account.disabled",
        /// A dashboard account was enabled again.
        AccountEnabled => "account.enabled",
        /// The role of a dashboard account was changed.
        AccountRoleChanged => "account.role_changed",
        /// A user was provisioned (SCIM).
        UserProvisioned => "user.provisioned",
        /// A user's profile was changed (SCIM).
        UserUpdated => "user.updated",
        /// A user was deactivated.
        UserDeactivated => "user.deactivated",
        /// A user was reactivated.
        UserReactivated => "user.reactivated",
        /// A user was deleted in SCIM (kept, deactivated).
        UserDeleted => "user.deleted",
        /// A user's personal data was erased.
        UserErased => "user.erased",
        /// A group was created (SCIM).
        GroupCreated => "group.created",
        /// A group was changed (SCIM).
        GroupUpdated => "group.updated",
        /// A group was deleted (SCIM).
        GroupDeleted => "group.deleted",
        /// An enrollment rule was created.
        EnrollmentRuleCreated => "enrollment_rule.created",
        /// An enrollment rule was changed.
        EnrollmentRuleUpdated => "enrollment_rule.updated",
        /// An enrollment rule was deleted.
        EnrollmentRuleDeleted => "enrollment_rule.deleted",
        /// A backfill of an enrollment rule was requested.
        EnrollmentRuleBackfillRequested => "enrollment_rule.backfill_requested",
        /// An enrollment rule assigned a flow.
        EnrollmentRuleAssigned => "enrollment_rule.assigned",
        /// An assignment's due date, priority or notes were changed.
        AssignmentUpdated => "assignment.updated",
        /// An assignment was cancelled.
        AssignmentCancelled => "assignment.cancelled",
        /// A flow's name, description or archived state was changed.
        FlowUpdated => "flow.updated",
        /// The organization's settings (cancel on deactivation, default reminder policy) were
        /// changed.
        SettingsUpdated => "settings.updated",
        /// An event trigger was created.
        EventTriggerCreated => "event_trigger.created",
        /// An event trigger was changed.
        EventTriggerUpdated => "event_trigger.updated",
        /// An event trigger was deleted.
        EventTriggerDeleted => "event_trigger.deleted",
        /// An inbound event's trigger assigned a flow.
        EventTriggerAssigned => "event_trigger.assigned",
        /// A signed event source was created.
        EventSourceCreated => "event_source.created",
        /// A signed event source's secret was rotated.
        EventSourceSecretRotated => "event_source.secret_rotated",
        /// A signed event source was deleted.
        EventSourceDeleted => "event_source.deleted",
    }
);

impl AuditAction {
    /// What was done, in the words the dashboard's audit log shows.
    pub fn description(self) -> &'static str {
        match self {
            Self::KeyCreated => "Generated an API key",
            Self::KeyRevoked => "Revoked an API key",
            Self::KeyRolled => "Rolled an API key",
            Self::WebhookCreated => "Created a webhook endpoint",
            Self::WebhookUpdated => "Changed a webhook endpoint",
            Self::WebhookSecretRotated => "Rotated a webhook signing secret",
            Self::WebhookDeleted => "Deleted a webhook endpoint",
            Self::WebhookRecovered => "Recovered failed webhook deliveries",
            Self::AccountInvited => "Invited a person to the dashboard",
            Self::AccountLinkIssued => "Issued a new sign-in link",
            Self::AccountPasswordSet => "Set a password with a sign-in link",
            Self::AccountRemoved => "Removed a dashboard account",
            Self::AccountDisabled => "Disabled a dashboard account",
            Self::AccountEnabled => "Enabled a dashboard account",
            Self::AccountRoleChanged => "Changed the role of a dashboard account",
            Self::UserProvisioned => "Provisioned a user (SCIM)",
            Self::UserUpdated => "Changed a user's profile (SCIM)",
            Self::UserDeactivated => "Deactivated a user",
            Self::UserReactivated => "Reactivated a user",
            Self::UserDeleted => "Deleted a user in SCIM (kept, deactivated)",
            Self::UserErased => "Erased a user's personal data",
            Self::GroupCreated => "Created a group (SCIM)",
            Self::GroupUpdated => "Changed a group (SCIM)",
            Self::GroupDeleted => "Deleted a group (SCIM)",
            Self::EnrollmentRuleCreated => "Created an enrollment rule",
            Self::EnrollmentRuleUpdated => "Changed an enrollment rule",
            Self::EnrollmentRuleDeleted => "Deleted an enrollment rule",
            Self::EnrollmentRuleBackfillRequested => "Started a backfill of an enrollment rule",
            Self::EnrollmentRuleAssigned => "An enrollment rule assigned a flow",
            Self::AssignmentUpdated => "Changed an assignment",
            Self::AssignmentCancelled => "Cancelled an assignment",
            Self::FlowUpdated => "Changed a flow",
            Self::SettingsUpdated => "Changed the organization's settings",
            Self::EventTriggerCreated => "Created an event trigger",
            Self::EventTriggerUpdated => "Changed an event trigger",
            Self::EventTriggerDeleted => "Deleted an event trigger",
            Self::EventTriggerAssigned => "An inbound event's trigger assigned a flow",
            Self::EventSourceCreated => "Created a signed event source",
            Self::EventSourceSecretRotated => "Rotated an event source's secret",
            Self::EventSourceDeleted => "Deleted a signed event source",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::AuditAction;

    #[test]
    fn every_audit_action_reads_back_from_its_stored_name() {
        for action in AuditAction::ALL {
            assert_eq!(action.as_str().parse::<AuditAction>(), Ok(*action));
        }
    }

    #[test]
    fn an_unknown_audit_action_is_an_error_naming_the_known_ones() {
        let error = "test.action".parse::<AuditAction>().unwrap_err();
        assert!(error.0.contains("key.created"), "{error}");
        assert!(error.0.contains("enrollment_rule.assigned"), "{error}");
        assert!("".parse::<AuditAction>().is_err());
        assert!("Key.Created".parse::<AuditAction>().is_err());
    }

    /// The names are those of rows already stored: renaming one would make them unreadable.
    #[test]
    fn audit_action_names_are_the_stored_ones() {
        let names: Vec<&str> = AuditAction::ALL
            .iter()
            .map(|action| action.as_str())
            .collect();
        assert_eq!(
            names,
            [
                "key.created",
                "key.revoked",
                "key.rolled",
                "webhook.created",
                "webhook.updated",
                "webhook.secret_rotated",
                "webhook.deleted",
                "webhook.recovered",
                "account.invited",
                "account.link_issued",
                "account.password_set",
                "account.removed",
                "account.disabled",
                "account.enabled",
                "account.role_changed",
                "user.provisioned",
                "user.updated",
                "user.deactivated",
                "user.reactivated",
                "user.deleted",
                "user.erased",
                "group.created",
                "group.updated",
                "group.deleted",
                "enrollment_rule.created",
                "enrollment_rule.updated",
                "enrollment_rule.deleted",
                "enrollment_rule.backfill_requested",
                "enrollment_rule.assigned",
                "assignment.updated",
                "assignment.cancelled",
                "flow.updated",
                "settings.updated",
                "event_trigger.created",
                "event_trigger.updated",
                "event_trigger.deleted",
                "event_trigger.assigned",
                "event_source.created",
                "event_source.secret_rotated",
                "event_source.deleted",
            ]
        );
    }

    #[test]
    fn every_audit_action_has_its_own_description() {
        let mut descriptions: Vec<&str> = AuditAction::ALL
            .iter()
            .map(|action| action.description())
            .collect();
        assert!(descriptions.iter().all(|text| !text.is_empty()));
        descriptions.sort_unstable();
        descriptions.dedup();
        assert_eq!(descriptions.len(), AuditAction::ALL.len());
    }
}
