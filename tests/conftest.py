# kafka_rig and tests.support import from the repository root, which pytest puts on sys.path
# (tests/ is a package there); nothing edits sys.path.
pytest_plugins = [
    "tests.support.kafka_fixtures",
    "tests.support.proxy_fixtures",
    "tests.support.redis_fixtures",
    "tests.support.broker_double",
]
