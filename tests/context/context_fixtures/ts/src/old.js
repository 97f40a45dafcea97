const util = require('./util.js');
const { greet, shout: loud } = require('./util');
