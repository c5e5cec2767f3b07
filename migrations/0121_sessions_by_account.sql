-- Ending every session of an account deletes its rows, found by the account id in the session's
-- data (the tower-sessions record: {"account": "acc_…", …}).
CREATE INDEX dashboard_sessions_account_idx ON dashboard_sessions ((data ->> 'account'));
