-- W3C trace context (`traceparent`) of the work that caused each lifecycle event: the request of
-- its command, or the scheduler's scan. The relay publishes an event with it and the
-- webhook-worker copies it onto the event's deliveries, so every attempt (and the webhook request
-- a customer receives) continues the trace of the request that caused it, however long the
-- delivery is retried and after the outbox row is pruned. NULL for events written before, and for
-- untraced work: their deliveries start a trace of their own.
ALTER TABLE outbox ADD COLUMN traceparent TEXT;
ALTER TABLE webhook_deliveries ADD COLUMN traceparent TEXT;
