-- webhook-sidecar schema 1 (MySQL 8 / MariaDB 10.6+): every table of the store at once.
-- Times are DECIMAL(16,6) seconds since the Unix epoch from the server's clock
-- (UNIX_TIMESTAMP(NOW(6)) with the session's time_zone pinned to UTC): exact to the
-- microsecond, the resolution of the listing's keyset cursor.
-- Keys (provider, event_id, nonce, order key) are VARBINARY: compared byte for byte, with no
-- collation folding case or padding spaces ("evt_A", "evt_a" and "evt_a " are three events).
-- Only immutable columns of webhook_event are indexed (the primary key and received_at).
-- MySQL commits each DDL statement on its own: every statement here may run again
-- (IF NOT EXISTS), so a run interrupted between two is completed by the next one.

CREATE TABLE IF NOT EXISTS webhook_event (
    provider         VARBINARY(255)  NOT NULL,
    event_id         VARBINARY(1024) NOT NULL,
    received_at      DECIMAL(16,6)   NOT NULL,
    body_sha256      VARBINARY(64)   NOT NULL,
    state            VARCHAR(16)     NOT NULL,
    attempt          INT             NOT NULL,
    lease_owner      VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    lease_until      DECIMAL(16,6),
    updated_at       DECIMAL(16,6)   NOT NULL,
    outcome          VARCHAR(32),
    response_status  INT,
    response_headers MEDIUMTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,  -- JSON pairs
    response_body    LONGBLOB,
    latency_ms       DOUBLE,
    payload_body     LONGBLOB,
    payload_request  MEDIUMTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,  -- JSON
    PRIMARY KEY (provider, event_id),
    -- Retention deletes the oldest rows of one provider in small batches.
    KEY webhook_event_received_at_idx (provider, received_at),
    CONSTRAINT webhook_event_state_check
        CHECK (state IN ('processing', 'done', 'failed', 'queued', 'dead')),
    CONSTRAINT webhook_event_attempt_check CHECK (attempt >= 0)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

-- Queue mode: one entry per queued event (waiting, in flight, or dead: due_at NULL).
-- seq is the order of acceptance; tries the take counter that fences workers.
CREATE TABLE IF NOT EXISTS webhook_queue (
    seq          BIGINT          NOT NULL AUTO_INCREMENT,
    provider     VARBINARY(255)  NOT NULL,
    event_id     VARBINARY(1024) NOT NULL,
    due_at       DECIMAL(16,6),
    queued_at    DECIMAL(16,6)   NOT NULL,
    base_attempt INT             NOT NULL,
    tries        INT             NOT NULL DEFAULT 0,
    order_key    VARBINARY(1024),
    last_error   TEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    lease_owner  VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    PRIMARY KEY (seq),
    UNIQUE KEY webhook_queue_event_key (provider, event_id),
    KEY webhook_queue_due_idx (provider, due_at, seq),
    KEY webhook_queue_order_idx (provider, order_key, seq),
    CONSTRAINT webhook_queue_event_fkey FOREIGN KEY (provider, event_id)
        REFERENCES webhook_event (provider, event_id) ON DELETE CASCADE,
    CONSTRAINT webhook_queue_checks CHECK (base_attempt >= 0 AND tries >= 0)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

-- The attempts timeline: one row per try, written with the result (same transaction).
CREATE TABLE IF NOT EXISTS webhook_attempt (
    id              BIGINT          NOT NULL AUTO_INCREMENT,
    provider        VARBINARY(255)  NOT NULL,
    event_id        VARBINARY(1024) NOT NULL,
    attempt         INT             NOT NULL,
    started_at      DECIMAL(16,6)   NOT NULL,
    finished_at     DECIMAL(16,6)   NOT NULL,
    owner           VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    outcome         VARCHAR(32)     NOT NULL,
    response_status INT,
    latency_ms      DOUBLE          NOT NULL,
    state           VARCHAR(16)     NOT NULL,
    error           TEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    PRIMARY KEY (id),
    KEY webhook_attempt_event_idx (provider, event_id, finished_at),
    CONSTRAINT webhook_attempt_event_fkey FOREIGN KEY (provider, event_id)
        REFERENCES webhook_event (provider, event_id) ON DELETE CASCADE
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

-- Signature nonces (and body-replay guards) bound to the first body seen with them.
CREATE TABLE IF NOT EXISTS webhook_nonce (
    provider     VARBINARY(255)  NOT NULL,
    nonce        VARBINARY(1024) NOT NULL,
    body_sha256  VARBINARY(64)   NOT NULL,
    received_at  DECIMAL(16,6)   NOT NULL,
    PRIMARY KEY (provider, nonce),
    KEY webhook_nonce_received_at_idx (provider, received_at)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

-- Each provider's hold state: paused by an operator, and its circuit breaker.
CREATE TABLE IF NOT EXISTS webhook_provider_state (
    provider        VARBINARY(255) NOT NULL,
    paused_at       DECIMAL(16,6),
    paused_by       TEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    pause_reason    TEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    breaker         VARCHAR(16)    NOT NULL DEFAULT 'closed',
    failures        INT            NOT NULL DEFAULT 0,
    failures_since  DECIMAL(16,6),
    last_failure    TEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    opened_at       DECIMAL(16,6),
    open_until      DECIMAL(16,6),
    probe_owner     VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    probe_until     DECIMAL(16,6),
    updated_at      DECIMAL(16,6)  NOT NULL,
    PRIMARY KEY (provider),
    CONSTRAINT webhook_provider_state_breaker_check
        CHECK (breaker IN ('closed', 'open', 'half_open'))
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

-- Delivery limits shared by every replica: a token bucket per provider, leased slots.
CREATE TABLE IF NOT EXISTS webhook_rate (
    provider    VARBINARY(255) NOT NULL,
    tokens      DOUBLE         NOT NULL,
    refilled_at DECIMAL(16,6)  NOT NULL,
    taken       INT            NOT NULL,
    PRIMARY KEY (provider)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

CREATE TABLE IF NOT EXISTS webhook_permit (
    provider    VARBINARY(255) NOT NULL,
    slot        INT            NOT NULL,
    owner       VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
    lease_until DECIMAL(16,6)  NOT NULL,
    PRIMARY KEY (provider, slot)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

-- Notifications sent, one row per (target digest, kind, provider).
CREATE TABLE IF NOT EXISTS webhook_notice (
    target   VARBINARY(255) NOT NULL,
    kind     VARBINARY(64)  NOT NULL,
    provider VARBINARY(255) NOT NULL,
    sent_at  DECIMAL(16,6)  NOT NULL,
    PRIMARY KEY (target, kind, provider)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;
