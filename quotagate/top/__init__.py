"""`quotagate top`: a live terminal view of running proxies, read from their metrics ports.

`scrape` reads one proxy (its /metrics and /quotas), `rows` turns successive scrapes of one or
several proxies into the table's rows (rates, quotas, headroom, throttle and mute state; sorted and
filtered); neither knows of a terminal. `app` is the Textual application over them (the `top` extra).
"""
