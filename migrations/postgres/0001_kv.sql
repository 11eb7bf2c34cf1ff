-- The store's trees (see src/store/kv): one table of byte keys and values, ordered by key within
-- each tree as sled orders them (bytea compares byte by byte), the names of the trees there are,
-- and the numbers `generate_id` hands out.
CREATE TABLE kv (
    tree TEXT COLLATE "C" NOT NULL,
    key BYTEA NOT NULL,
    value BYTEA NOT NULL,
    PRIMARY KEY (tree, key)
);

CREATE TABLE kv_trees (
    name TEXT COLLATE "C" PRIMARY KEY
);

CREATE SEQUENCE kv_ids AS BIGINT MINVALUE 0 START WITH 0;
