"""Real-shaped CSVs made in the tests (issue 38): the shapes of three public files no one
here wrote, generated with a seed so that no data is downloaded.

* :func:`penguins`: 344 rows like palmerpenguins' ``penguins.csv`` (Horst, Hill and
  Gorman 2020; the per-species means and standard deviations below are that file's,
  rounded): a 3-class string label ``species`` (Adelie 152, Chinstrap 68, Gentoo 124),
  the string columns ``island`` and ``sex``, four numeric measurements, ``year``; the
  two rows without measurements and the eleven without ``sex`` are empty cells (the real
  file writes them ``NA``, which is another engineer's case: issue 38 item 2).
* :func:`five_classes`: a 5-class imbalanced string label (shares 40/25/17/11/7 %)
  over four numeric features and one string feature.
* :func:`auto_mpg`: 406 rows like UCI's auto-mpg: label ``mpg``, 8 of them empty (as in
  the real file), cylinders, displacement, horsepower, weight, acceleration, model year
  and origin; mpg follows weight, year and horsepower with noise (no car names: an
  ID-like column is issue 38 item 5).

Each returns the path and a pandas DataFrame of what was written, for the peers.
"""
import numpy as np
import pandas as pd

# palmerpenguins: species -> (rows, island shares, {column: (mean, std)}).
PENGUINS = {
    "Adelie": (152, {"Biscoe": 44, "Dream": 56, "Torgersen": 52},
               {"bill_length_mm": (38.8, 2.7), "bill_depth_mm": (18.3, 1.2),
                "flipper_length_mm": (190.0, 6.5), "body_mass_g": (3700.0, 460.0)}),
    "Chinstrap": (68, {"Dream": 68},
                  {"bill_length_mm": (48.8, 3.3), "bill_depth_mm": (18.4, 1.1),
                   "flipper_length_mm": (196.0, 7.1), "body_mass_g": (3733.0, 384.0)}),
    "Gentoo": (124, {"Biscoe": 124},
               {"bill_length_mm": (47.5, 3.1), "bill_depth_mm": (15.0, 1.0),
                "flipper_length_mm": (217.0, 6.5), "body_mass_g": (5076.0, 504.0)}),
}
MEASURES = ("bill_length_mm", "bill_depth_mm", "flipper_length_mm", "body_mass_g")


def _write(df: pd.DataFrame, path) -> str:
  df.to_csv(path, index=False, na_rep="")  # Missing cells are empty.
  return str(path)


def penguins(path, seed: int = 0):
  rng = np.random.default_rng(seed)
  rows = []
  for species, (n, islands, stats) in PENGUINS.items():
    names = [name for name, k in islands.items() for _ in range(k)]
    for i in range(n):
      row = {"species": species, "island": names[i]}
      for col in MEASURES:
        mean, std = stats[col]
        value = rng.normal(mean, std)
        row[col] = round(value) if col in ("flipper_length_mm", "body_mass_g") else \
            round(value, 1)
      row["sex"] = "male" if rng.random() < 0.5 else "female"
      row["year"] = int(rng.integers(2007, 2010))
      rows.append(row)
  df = pd.DataFrame(rows).sample(frac=1.0, random_state=seed).reset_index(drop=True)
  df = df[["species", "island", *MEASURES, "sex", "year"]]
  df.loc[[3, 271], list(MEASURES) + ["sex"]] = np.nan   # Two rows without measurements.
  df.loc[rng.choice(np.arange(10, 340), 9, replace=False), "sex"] = np.nan
  df["flipper_length_mm"] = df["flipper_length_mm"].astype("Int64")
  df["body_mass_g"] = df["body_mass_g"].astype("Int64")
  return _write(df, path), df


FIVE_CLASSES = {"sunny": 0.40, "cloudy": 0.25, "rain": 0.17, "fog": 0.11, "snow": 0.07}


def five_classes(path, rows: int = 600, seed: int = 1):
  rng = np.random.default_rng(seed)
  names = list(FIVE_CLASSES)
  label = rng.choice(names, size=rows, p=list(FIVE_CLASSES.values()))
  centers = rng.normal(0.0, 1.4, size=(len(names), 4))
  k = np.array([names.index(v) for v in label])
  x = centers[k] + rng.normal(0.0, 1.0, size=(rows, 4))
  df = pd.DataFrame({"temp_max": np.round(15 + 8 * x[:, 0], 1),
                     "temp_min": np.round(5 + 6 * x[:, 1], 1),
                     "precipitation": np.round(np.abs(4 * x[:, 2]), 2),
                     "wind": np.round(3 + x[:, 3], 2),
                     "station": rng.choice(["north", "south", "east"], size=rows),
                     "weather": label})
  return _write(df, path), df


def auto_mpg(path, rows: int = 406, missing_labels: int = 8, seed: int = 2):
  rng = np.random.default_rng(seed)
  cylinders = rng.choice([4, 6, 8], size=rows, p=[0.52, 0.22, 0.26])
  displacement = np.round(cylinders * rng.normal(40, 6, rows), 1)
  horsepower = np.round(displacement * 0.45 + rng.normal(20, 8, rows))
  weight = np.round(1500 + displacement * 7 + rng.normal(0, 250, rows))
  acceleration = np.round(20 - horsepower / 25 + rng.normal(0, 1.5, rows), 1)
  year = rng.integers(70, 83, rows)
  origin = rng.choice([1, 2, 3], size=rows, p=[0.62, 0.17, 0.21])
  mpg = (46 - 0.0065 * weight + 0.75 * (year - 76) - 0.03 * horsepower
         + 1.2 * (origin - 1) + rng.normal(0, 2.8, rows))
  df = pd.DataFrame({"mpg": np.round(mpg, 1), "cylinders": cylinders,
                     "displacement": displacement, "horsepower": horsepower.astype(int),
                     "weight": weight.astype(int), "acceleration": acceleration,
                     "model_year": year, "origin": origin})
  df.loc[rng.choice(rows, missing_labels, replace=False), "mpg"] = np.nan
  return _write(df, path), df
