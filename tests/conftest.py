pytest_plugins = ["tests.kafka_fixtures", "tests.proxy_fixtures"]
