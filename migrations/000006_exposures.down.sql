DROP TABLE exposures;
