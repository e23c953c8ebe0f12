"""The typed result: hosts, flows and captures (result), what the analyses find (findings), one way to and from
JSON (jsonform, with the schema result.schema.json that schema generates from the records), a saved result read
back (saved; older, for an earlier schema's). Nothing here reads a
capture or infers: every room above builds these records, every report renders them."""
