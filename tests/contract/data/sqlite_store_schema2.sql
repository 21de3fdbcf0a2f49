-- A store file of unbroken store schema 2 (git c66619e), dumped with sqlite3 iterdump: runs
-- 'leased-run' (5 turns under fence 1, one ledger entry, lease released) and 'free-run' (2 turns).
-- Made by /tmp script: RunWriter turns + ledger_claim on the schema-2 code; see test_sqlite_schema_upgrade.py.
BEGIN TRANSACTION;
CREATE TABLE unbroken_effects (
    key        TEXT PRIMARY KEY,
    run_id     TEXT NOT NULL,
    call_id    TEXT NOT NULL,
    tool       TEXT NOT NULL,
    args_hash  TEXT NOT NULL,
    status     TEXT NOT NULL,
    attempts   INTEGER NOT NULL,
    result     TEXT,
    created_at REAL NOT NULL,
    updated_at REAL NOT NULL,
    checksum   TEXT -- of the entry's JSON, checked on every read (NULL: written by store schema 1)
);
INSERT INTO "unbroken_effects" VALUES('ub_old_key','leased-run','toolu_1','send_email','h1','pending',1,NULL,1001.0,1001.0,'54718b6d');
CREATE TABLE unbroken_meta (
    key   TEXT PRIMARY KEY,
    value TEXT NOT NULL
);
INSERT INTO "unbroken_meta" VALUES('store_schema','2');
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
INSERT INTO "unbroken_records" VALUES('leased-run',1,'turn 1',1,'{"v":1,"seq":1,"label":"turn 1","snapshot":true,"msg_start":0,"messages":[{"role":"assistant","content":[{"type":"text","text":"step 1"}]}],"fields":{"run_id":"leased-run","task":"an old leased run","provider":"anthropic","schema_version":1,"save_seq":1,"turns":1,"tokens_used":10,"usage":{"input_tokens":1,"output_tokens":2},"phase":"awaiting_model","message_count":1,"business_state":{"k1":{"step":1,"items":[0]}},"business_state_version":1,"pending_calls":[],"results":{},"resolutions":{},"attempts":{},"output":null,"error":null,"summary":null,"summary_upto":0,"created_at":1000.0,"updated_at":1001.0}}','105e4092');
INSERT INTO "unbroken_records" VALUES('leased-run',2,'turn 2',0,'{"v":1,"seq":2,"label":"turn 2","snapshot":false,"msg_start":1,"messages":[{"role":"assistant","content":[{"type":"text","text":"step 2"}]}],"fields":{"save_seq":2,"turns":2,"tokens_used":30,"usage":{"input_tokens":2,"output_tokens":4},"message_count":2,"business_state":{"k1":{"step":1,"items":[0]},"k2":{"step":2,"items":[0,1]}},"updated_at":1002.0}}','003bdb0c');
INSERT INTO "unbroken_records" VALUES('leased-run',3,'turn 3',0,'{"v":1,"seq":3,"label":"turn 3","snapshot":false,"msg_start":2,"messages":[{"role":"assistant","content":[{"type":"text","text":"step 3"}]}],"fields":{"save_seq":3,"turns":3,"tokens_used":60,"usage":{"input_tokens":3,"output_tokens":6},"message_count":3,"business_state":{"k1":{"step":1,"items":[0]},"k2":{"step":2,"items":[0,1]},"k0":{"step":3,"items":[0,1,2]}},"updated_at":1003.0}}','42f1f2f3');
INSERT INTO "unbroken_records" VALUES('leased-run',4,'turn 4',0,'{"v":1,"seq":4,"label":"turn 4","snapshot":false,"msg_start":3,"messages":[{"role":"assistant","content":[{"type":"text","text":"step 4"}]}],"fields":{"save_seq":4,"turns":4,"tokens_used":100,"usage":{"input_tokens":4,"output_tokens":8},"message_count":4,"business_state":{"k1":{"step":4,"items":[]},"k2":{"step":2,"items":[0,1]},"k0":{"step":3,"items":[0,1,2]}},"updated_at":1004.0}}','6dec5c7f');
INSERT INTO "unbroken_records" VALUES('leased-run',5,'turn 5',0,'{"v":1,"seq":5,"label":"turn 5","snapshot":false,"msg_start":4,"messages":[{"role":"assistant","content":[{"type":"text","text":"step 5"}]}],"fields":{"save_seq":5,"turns":5,"tokens_used":150,"usage":{"input_tokens":5,"output_tokens":10},"message_count":5,"business_state":{"k1":{"step":4,"items":[]},"k2":{"step":5,"items":[0]},"k0":{"step":3,"items":[0,1,2]}},"updated_at":1005.0}}','78b24d7d');
INSERT INTO "unbroken_records" VALUES('free-run',1,'turn 1',1,'{"v":1,"seq":1,"label":"turn 1","snapshot":true,"msg_start":0,"messages":[{"role":"assistant","content":[{"type":"text","text":"step 1"}]}],"fields":{"run_id":"free-run","task":"an old run without a lease","provider":"anthropic","schema_version":1,"save_seq":1,"turns":1,"tokens_used":10,"usage":{"input_tokens":1,"output_tokens":2},"phase":"awaiting_model","message_count":1,"business_state":{"k1":{"step":1,"items":[0]}},"business_state_version":1,"pending_calls":[],"results":{},"resolutions":{},"attempts":{},"output":null,"error":null,"summary":null,"summary_upto":0,"created_at":1000.0,"updated_at":1001.0}}','bf3911d5');
INSERT INTO "unbroken_records" VALUES('free-run',2,'turn 2',0,'{"v":1,"seq":2,"label":"turn 2","snapshot":false,"msg_start":1,"messages":[{"role":"assistant","content":[{"type":"text","text":"step 2"}]}],"fields":{"save_seq":2,"turns":2,"tokens_used":30,"usage":{"input_tokens":2,"output_tokens":4},"message_count":2,"business_state":{"k1":{"step":1,"items":[0]},"k2":{"step":2,"items":[0,1]}},"updated_at":1002.0}}','003bdb0c');
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
INSERT INTO "unbroken_runs" VALUES('leased-run','an old leased run','awaiting_model',5,150,5,1005.0,1,NULL,0.0);
INSERT INTO "unbroken_runs" VALUES('free-run','an old run without a lease','awaiting_model',2,30,2,1002.0,0,NULL,NULL);
CREATE INDEX unbroken_effects_run ON unbroken_effects (run_id, created_at);
COMMIT;
