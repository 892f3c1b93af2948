"""Configuration: the TOML file, validated once into dataclasses whose errors name the key."""

from quotagate.config.settings import Config, ConfigError, MetricsConfig, ProxyConfig, load_config, parse_config

__all__ = ["Config", "ConfigError", "MetricsConfig", "ProxyConfig", "load_config", "parse_config"]
