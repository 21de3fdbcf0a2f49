BEGIN TRANSACTION;
CREATE TABLE unbroken_effects (
    key        TEXT NOT NULL,
    run_id     TEXT NOT NULL,
    call_id    TEXT NOT NULL,
    tool       TEXT NOT NULL,
    args_hash  TEXT NOT NULL,
    status     TEXT NOT NULL,
    attempts   INTEGER NOT NULL,
    result     TEXT,
    created_at REAL NOT NULL,
    updated_at REAL NOT NULL,
    checksum   TEXT, -- of the entry's JSON, checked on every read (NULL: written by store schema 1)
    PRIMARY KEY (run_id, key)
);
INSERT INTO "unbroken_effects" VALUES('ub_done_key','v6-run','call_0','send_email','aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa','succeeded',1,'{"call_id":"call_0","content":"charged 5","is_error":false,"how":"executed"}',1003.0,1003.0,'04d529ba');
INSERT INTO "unbroken_effects" VALUES('ub_pending_key','v6-run','call_1','send_email','aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa','pending',1,NULL,1050.0,1050.0,'4126749a');
CREATE TABLE unbroken_meta (
    key   TEXT PRIMARY KEY,
    value TEXT NOT NULL
);
INSERT INTO "unbroken_meta" VALUES('store_schema','6');
INSERT INTO "unbroken_meta" VALUES('lease_clock_boot:ab82f7d6-8ec3-4647-bdf6-e0ada23f5a02','1');
CREATE TABLE unbroken_queue (
    run_id       TEXT PRIMARY KEY,
    task         TEXT NOT NULL,
    agent        TEXT,
    submitted_at REAL NOT NULL
);
CREATE TABLE unbroken_records (
    run_id   TEXT    NOT NULL,
    seq      INTEGER NOT NULL,
    label    TEXT    NOT NULL,
    snapshot INTEGER NOT NULL,
    body     TEXT    NOT NULL,
    checksum TEXT    NOT NULL,
    UNIQUE (run_id, seq)
);
INSERT INTO "unbroken_records" VALUES('v6-run',1,'turn 1',1,'{"v":2,"seq":1,"label":"turn 1","snapshot":true,"msg_start":0,"messages":[{"role":"assistant","content":[{"type":"text","text":"step 1"}]}],"fields":{"run_id":"v6-run","task":"contract task","provider":"anthropic","schema_version":2,"turns":1,"tokens_used":10,"usage":{"input_tokens":1,"output_tokens":2},"phase":"awaiting_model","business_state":{"k1":{"step":1,"items":[0]}},"business_state_version":1,"pending_calls":[],"results":{},"resolutions":{},"attempts":{},"output":null,"error":null,"summary":null,"summary_upto":0,"created_at":1000.0,"updated_at":1001.0}}','72466aad');
INSERT INTO "unbroken_records" VALUES('v6-run',2,'turn 2',0,'{"v":2,"seq":2,"label":"turn 2","msg_start":1,"messages":[{"role":"assistant","content":[{"type":"text","text":"step 2"}]}],"fields":{"turns":2,"tokens_used":30,"usage":{"input_tokens":2,"output_tokens":4},"business_state":{"k1":{"step":1,"items":[0]},"k2":{"step":2,"items":[0,1]}},"updated_at":1002.0}}','776d89a4');
INSERT INTO "unbroken_records" VALUES('v6-run',3,'turn 3',0,'{"v":2,"seq":3,"label":"turn 3","msg_start":2,"messages":[{"role":"assistant","content":[{"type":"text","text":"step 3"}]}],"fields":{"turns":3,"tokens_used":60,"usage":{"input_tokens":3,"output_tokens":6},"business_state":{"k1":{"step":1,"items":[0]},"k2":{"step":2,"items":[0,1]},"k0":{"step":3,"items":[0,1,2]}},"updated_at":1003.0}}','71422523');
CREATE TABLE unbroken_runs (
    run_id        TEXT PRIMARY KEY,
    task          TEXT,
    phase         TEXT,
    turns         INTEGER NOT NULL DEFAULT 0,
    tokens_used   INTEGER NOT NULL DEFAULT 0,
    head_seq      INTEGER NOT NULL DEFAULT 0,
    updated_at    REAL,
    fence         INTEGER NOT NULL DEFAULT 0,
    owner         TEXT,
    lease_expires REAL
);
INSERT INTO "unbroken_runs" VALUES('v6-run','contract task','awaiting_model',3,60,3,1003.0,1,'worker-1',1.0000005283349649429e+10);
CREATE TABLE unbroken_segments (
    run_id    TEXT    NOT NULL,
    first_seq INTEGER NOT NULL,
    last_seq  INTEGER NOT NULL,
    idx       BLOB    NOT NULL,
    seal      TEXT    NOT NULL,
    bodies    BLOB    NOT NULL,
    PRIMARY KEY (run_id, first_seq)
);
CREATE INDEX unbroken_effects_run ON unbroken_effects (run_id, created_at);
CREATE INDEX unbroken_queue_order ON unbroken_queue (submitted_at, run_id);
CREATE VIEW unbroken_append AS
    SELECT run_id, seq, label, snapshot, body, checksum,
           NULL AS expect_seq, NULL AS fence, NULL AS task, NULL AS phase, NULL AS turns,
           NULL AS tokens_used, NULL AS updated_at
    FROM unbroken_records WHERE 0;
CREATE TRIGGER unbroken_append_insert INSTEAD OF INSERT ON unbroken_append
BEGIN
    UPDATE unbroken_runs
       SET head_seq = NEW.seq, task = NEW.task, phase = NEW.phase, turns = NEW.turns,
           tokens_used = NEW.tokens_used, updated_at = NEW.updated_at
     WHERE run_id = NEW.run_id AND head_seq = NEW.expect_seq AND (NEW.fence IS NULL OR fence = NEW.fence);
    SELECT RAISE(ABORT, 'unbroken: refused') WHERE changes() = 0;
    INSERT INTO unbroken_records (run_id, seq, label, snapshot, body, checksum)
    VALUES (NEW.run_id, NEW.seq, NEW.label, NEW.snapshot, NEW.body, NEW.checksum);
END;
COMMIT;
