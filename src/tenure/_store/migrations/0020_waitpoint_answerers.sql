-- tenure 0020: who may answer a waitpoint, and what its answer looks like. A tool declares
-- both where it makes the waitpoint (ctx.waitpoint(name, answer=Type, answered_by=...)):
-- 'holder' (the default) is whoever the tool handed the token to, a person or a service; only
-- a 'caller' waitpoint may be answered by the job's caller (an MCP client, asked by
-- elicitation with a form built from answer_schema), and only through the statement that
-- checks this column (complete_waitpoint, by job and name). answer_schema is the JSON Schema
-- of the declared answer type (NULL: any JSON), the tool's words, never journaled.
ALTER TABLE tenure_waitpoints
    ADD COLUMN answered_by text NOT NULL DEFAULT 'holder'
        CHECK (answered_by IN ('holder', 'caller')),
    ADD COLUMN answer_schema jsonb;
