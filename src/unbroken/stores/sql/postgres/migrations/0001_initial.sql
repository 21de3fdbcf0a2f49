-- 0001: runs (summary + lease), save records, effect ledger.
CREATE TABLE unbroken_runs (
    run_id        text PRIMARY KEY,
    task          text,
    phase         text,
    turns         integer NOT NULL DEFAULT 0,
    tokens_used   bigint  NOT NULL DEFAULT 0,
    head_seq      bigint  NOT NULL DEFAULT 0,
    updated_at    double precision,
    fence         bigint  NOT NULL DEFAULT 0,
    owner         text,
    lease_expires timestamptz
);

CREATE TABLE unbroken_records (
    run_id   text    NOT NULL,
    seq      bigint  NOT NULL,
    label    text    NOT NULL,
    snapshot boolean NOT NULL,
    body     text    NOT NULL,
    checksum text    NOT NULL,
    PRIMARY KEY (run_id, seq)
);

CREATE TABLE unbroken_effects (
    key        text PRIMARY KEY,
    run_id     text NOT NULL,
    call_id    text NOT NULL,
    tool       text NOT NULL,
    args_hash  text NOT NULL,
    status     text NOT NULL,
    attempts   integer NOT NULL,
    result     text,
    created_at double precision NOT NULL,
    updated_at double precision NOT NULL
);
CREATE INDEX unbroken_effects_run ON unbroken_effects (run_id, created_at);
