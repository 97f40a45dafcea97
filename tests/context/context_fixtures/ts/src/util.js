function greet(name) {
  return 'hi ' + name;
}
function shout(name) { return name.toUpperCase(); }
module.exports = { greet, shout };
