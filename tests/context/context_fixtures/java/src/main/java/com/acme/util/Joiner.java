package com.acme.util;

public class Joiner {
  String join() { return Strings.padLeft("", LIMIT); }
}
