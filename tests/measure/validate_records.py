"""validate_records.py SCHEMA FILE...: every JSON Lines record in FILEs against SCHEMA
(docs/record.schema.json).  Exit 0 when all hold, 1 naming each record that does not,
77 when jsonschema (pinned in python/requirements-test.txt) is not installed."""
import json
import sys

try:
    import jsonschema
except ImportError:
    print("SKIP: python jsonschema is not installed (make python installs the pinned one)")
    sys.exit(77)


def main() -> int:
    schema = json.load(open(sys.argv[1], encoding="utf-8"))
    jsonschema.Draft202012Validator.check_schema(schema)
    v = jsonschema.Draft202012Validator(schema)
    n = bad = 0
    for path in sys.argv[2:]:
        with open(path, encoding="utf-8") as f:
            for i, line in enumerate(f, 1):
                if not line.strip():
                    continue
                n += 1
                for e in v.iter_errors(json.loads(line)):
                    bad += 1
                    where = "/".join(str(p) for p in e.absolute_path) or "(record)"
                    print(f"{path}:{i}: {where}: {e.message}")
    print(f"{n} records checked against the schema, {bad} errors")
    return 1 if bad else 0


sys.exit(main())
